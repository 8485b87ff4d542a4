B = dict(actor_lr=1e-2, clip_eps=0.2, gae_lambda=0.97)
G = [dict(B, entropy_coef=e, critic_lr=c, damping=d, damping_max=d) for e in (0.0, 0.003) for c in (3e-3, 1e-2) for d in (0.01, 0.003)]
S = [dict(unsafe_reward=u, actor_lr=a, pid_ki=k) for u in (0.0, 0.3) for a in (3e-3, 1e-2) for k in (1e-3, 3e-3)]
ss = dict(episodes_per_iteration=1024, num_epochs=8, num_minibatches=8)
ROUNDS = [
    ("ecop", dict(episodes_per_iteration=2048, num_epochs=32, width=16), G, 4, 400),
    ("ecop", dict(episodes_per_iteration=2048, num_epochs=32, width=32), G, 4, 300),
    ("saute", dict(ss, observation="xyt"), S, 4, 400),
    ("saute", dict(ss, observation="xy"), S, 4, 400),
]
