lrs = [3e-3, 1e-2, 3e-2]
G = [dict(actor_lr=a, gae_lambda=l, damping=d, damping_max=d) for a in lrs for l in (0.9, 0.97) for d in (0.01, 0.03)]
S = [dict(unsafe_reward=u, actor_lr=a) for u in (0.0, 1.0, 3.0) for a in (3e-3, 1e-2)]
ROUNDS = [
    ("ecop", dict(episodes_per_iteration=512, num_epochs=8, width=16), G, 4, 400),
    ("ecop", dict(episodes_per_iteration=512, num_epochs=8, width=32), G, 4, 400),
    ("ecop", dict(episodes_per_iteration=1024, num_epochs=16, width=16), G, 4, 200),
    ("saute", dict(observation="xyt"), S, 4, 250),
    ("saute", dict(observation="xy"), S, 4, 250),
]
