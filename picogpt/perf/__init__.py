"""Speed: fast matrix kernels (kernels.py), the weight layout they read (layout.py), facts about
this machine (machine.py), timing (timing.py) and the one cost/speedup measurement (speedup.py).
Imports the teaching core; the teaching core never imports from here."""
