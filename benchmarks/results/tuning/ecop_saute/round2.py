G = [dict(actor_lr=a, clip_eps=e, gae_lambda=0.97, damping=d, damping_max=d) for a in (1e-2, 3e-2) for e in (0.2, 0.3) for d in (0.01, 0.03)]
S = [dict(unsafe_reward=u, actor_lr=a, entropy_coef=0.0) for u in (0.0, 0.3) for a in (1e-2, 3e-2)]
ROUNDS = [
    ("ecop", dict(episodes_per_iteration=2048, num_epochs=16, width=16), G, 4, 300),
    ("ecop", dict(episodes_per_iteration=2048, num_epochs=32, width=16), G, 4, 200),
    ("ecop", dict(episodes_per_iteration=1024, num_epochs=16, width=32), G, 4, 400),
    ("ecop", dict(episodes_per_iteration=4096, num_epochs=16, width=16), G, 4, 200),
    ("saute", dict(observation="xyt", episodes_per_iteration=512, num_minibatches=8), S, 4, 300),
]
