"""What makes the model fast: the matrix product model.py chooses once when a model is prepared
and hands gpt2.py (kernels.py), its loops compiled by numba (compiled.py), and picogpt's threads,
which share a product while NumPy's BLAS runs on one thread (threads.py). The teaching core never
imports from here."""
