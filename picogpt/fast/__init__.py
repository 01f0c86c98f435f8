"""What makes the model fast: the matrix product model.py hands gpt2.py (kernels.py, with its
compiled loops in compiled.py and its threads in threads.py) and where the weights live
(layout.py). Imports the teaching core's data only; the teaching core never imports from here."""
