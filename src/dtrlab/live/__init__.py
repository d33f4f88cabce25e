"""DTR on a real PyTorch step: a `__torch_dispatch__` wrapper below autograd that evicts and replays.

The package owns the tensors (values, recipes, replay, generator states); what to evict and what
to rematerialize is decided by the simulator's own engine (sim/pyengine.py), which the session
feeds the step's instructions as it runs (session.py). Needs the optional `capture` extra (torch).
"""
