"""How much memory this process may still take, and a clear refusal before an allocation that
would not fit (loading half-precision weights widened to float32, copying weights in)."""

from ..errors import PicoGPTError


def meminfo_bytes():
    """Linux's /proc/meminfo as {name: bytes} ({} elsewhere)."""
    try:
        with open("/proc/meminfo") as lines:
            return {name: int(value.split()[0]) * 1024 for name, value in (line.split(":") for line in lines)}
    except (OSError, ValueError, IndexError):
        return {}


def available_memory_bytes():
    """Memory the OS could give this process now (Linux MemAvailable), or None if unknown."""
    return meminfo_bytes().get("MemAvailable")


def ensure_fits(n_bytes, what, advice, margin=2**30):
    """Raise a clear error, before allocating, if n_bytes more memory would leave less than
    `margin` of what the OS could give this process (nothing is checked where that is unknown)."""
    available = available_memory_bytes()
    if n_bytes and available is not None and n_bytes + margin > available:
        raise PicoGPTError(f"{what} needs {n_bytes / 1e9:.1f} GB, and {available / 1e9:.1f} GB is "
                           f"available: {advice}")
