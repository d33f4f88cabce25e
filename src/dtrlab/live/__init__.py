"""DTR on a real PyTorch step: a `__torch_dispatch__` wrapper below autograd that evicts and replays.

The package owns the tensors (values, recipes, replay, generator states); which storage to evict
is the simulator's policy, scored on the live graph (scoring.py), on a clock (clocks.py). Needs the optional `capture` extra (torch).
"""
