"""Getting GPT-2 in and out: the safetensors format, parameters from tensors, model names,
downloads and the tokenizer. The teaching core (gpt2.py, sampling.py, speculative.py, ...)
never imports from here; model.py and the command line do."""
