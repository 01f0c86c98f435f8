"""What makes the model fast: the matrix product model.py chooses once when a model is prepared
and hands gpt2.py (kernels.py), its loops compiled by numba (compiled.py), picogpt's threads that
share a product (threads.py) and the OpenBLAS NumPy ships, put on one thread (openblas.py).
The teaching core never imports from here."""
