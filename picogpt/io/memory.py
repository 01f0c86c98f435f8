"""How much memory this process may still take, and a clear refusal before an allocation that
would not fit (loading half-precision weights widened to float32, copying weights in).

Three kinds of limit can stop an allocation, and the room left is the least of them (Linux):

- the machine's: MemAvailable in /proc/meminfo (free memory and the page cache it can drop);
- the process's own: `ulimit -v` (RLIMIT_AS, against its address space, VmSize: mapped
  checkpoints count) and `ulimit -d` (RLIMIT_DATA, against VmData), less what it uses now;
- its control group's (a container, a systemd slice, a batch job): memory.max (cgroup v2) or
  memory.limit_in_bytes (v1) of its group and of every group above it, less the group's use
  now, counting its inactive page cache (which the kernel drops first) as room.

Past the first, an allocation fails with MemoryError; past the last, the kernel kills the process.
"""

import posixpath
import re

from ..errors import PicoGPTError

try:
    import resource
except ImportError:  # Windows
    resource = None

PROC = "/proc"  # the tests point these at folders of their own
CGROUP = "/sys/fs/cgroup"
# the files of a control group: its limit, its use now, and its inactive page cache in memory.stat
CGROUP_FILES = {2: ("memory.max", "memory.current", "inactive_file"),
                1: ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")}


def read_text(path):
    """A small file of /proc or /sys as text, or None if it cannot be read."""
    try:
        with open(path) as f:
            return f.read()
    except (OSError, ValueError):
        return None


def meminfo_bytes():
    """Linux's /proc/meminfo as {name: bytes} ({} elsewhere)."""
    try:
        return {name: int(value.split()[0]) * 1024
                for name, value in (line.split(":") for line in (read_text(f"{PROC}/meminfo") or "").splitlines())}
    except (ValueError, IndexError):
        return {}


def process_rooms():
    """{limit: bytes left} for the process's own limits that are set (ulimit -v and -d)."""
    if resource is None:
        return {}
    status = read_text(f"{PROC}/self/status") or ""
    rooms = {}
    for name, limit, field in (("ulimit -v", resource.RLIMIT_AS, "VmSize"), ("ulimit -d", resource.RLIMIT_DATA, "VmData")):
        soft = resource.getrlimit(limit)[0]
        used = re.search(rf"^{field}:\s*(\d+) kB$", status, re.MULTILINE)
        if soft != resource.RLIM_INFINITY and used:
            rooms[name] = soft - int(used[1]) * 1024
    return rooms


def cgroup_rooms():
    """{group folder: bytes left} for every memory limit of this process's control group and
    the groups above it, in cgroup v2 and v1 (in a container, the group's path as the host names
    it may not exist: the levels above it, up to the container's own root, still count)."""
    rooms = {}
    for line in (read_text(f"{PROC}/self/cgroup") or "").splitlines():
        hierarchy, controllers, group = (line.split(":", 2) + ["", ""])[:3]
        version = 2 if hierarchy == "0" and not controllers else 1 if "memory" in controllers.split(",") else None
        if version is None:
            continue
        root = CGROUP if version == 2 else f"{CGROUP}/memory"
        folder = posixpath.normpath(root + "/" + group.strip())
        while True:
            room = group_room(folder, *CGROUP_FILES[version])
            if room is not None:
                rooms[folder] = room
            if folder == root or not folder.startswith(root + "/"):
                break
            folder = posixpath.dirname(folder)
    return rooms


def group_room(folder, limit_file, usage_file, inactive_key):
    """Bytes a control group's limit leaves (None if it has none): the limit, less its use,
    plus its inactive page cache."""
    limit, usage = (read_text(f"{folder}/{name}") for name in (limit_file, usage_file))
    if limit is None or usage is None or not limit.strip().isdigit() or not usage.strip().isdigit():
        return None  # no such group here, or "max": no limit
    inactive = re.search(rf"^{inactive_key} (\d+)$", read_text(f"{folder}/memory.stat") or "", re.MULTILINE)
    return int(limit) - int(usage) + (int(inactive[1]) if inactive else 0)


def available_memory_bytes():
    """Memory this process could still take, the least that each limit above leaves (never
    below 0), or None if none is known (not Linux)."""
    rooms = [meminfo_bytes().get("MemAvailable"), *process_rooms().values(), *cgroup_rooms().values()]
    rooms = [room for room in rooms if room is not None]
    return max(min(rooms), 0) if rooms else None


def size_text(n_bytes):
    """A size as picogpt's messages give it: '1.07 GB', '82 MB', '1.6 MB', '4,096 bytes'."""
    if n_bytes >= 1e9:
        return f"{n_bytes / 1e9:.2f} GB"
    if n_bytes >= 1e5:
        return f"{n_bytes / 1e6:.{0 if n_bytes >= 1e7 else 1}f} MB"
    return f"{n_bytes:,} bytes"


def ensure_fits(n_bytes, what, advice, margin=2**30):
    """Raise a clear error, before allocating, if n_bytes more memory would leave less than
    `margin` of what this process could take (nothing is checked where that is unknown). The
    margin is room for what runs beside the allocation (a forward pass's activations, a KV
    cache), and the message says so."""
    available = available_memory_bytes()
    if n_bytes and available is not None and n_bytes + margin > available:
        kept = (f", and picogpt keeps {size_text(margin)} free beside it (for the forward pass and the KV cache): "
                f"{size_text(n_bytes + margin)} in all" if margin else "")
        raise PicoGPTError(f"{what} needs {size_text(n_bytes)}{kept}; {size_text(available)} is available to "
                           f"this process (the least of the machine's free memory, its ulimit -v and -d, and its "
                           f"control group's memory limit): {advice}")
