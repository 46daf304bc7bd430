"""The one description of the machine and software a result was made with.

Every writer of results (``magicpig eval``'s metrics.json, ``bench decode`` / ``bench kernel`` rows and
headers, ``scripts/gpu_check.sh``'s machine.json, attention captures) records ``machine_record()``, so the
same fact has the same key everywhere:

    cpu_model, cpu_cores_logical, cpu_cores_physical, host_memory_gb, isa, threads, device,
    gpu_name, gpu_memory_gb, gpu_count, gpu_capability, gpu_driver, cuda_version,
    torch_version, transformers_version, magicpig_version, python_version, platform, hostname

``gpu_*`` are None without a CUDA device. ``isa`` is the CPU module's variant when the module is loaded
(``load_cpu_module=True`` builds it first, as the benchmarks that use it do), "not loaded" otherwise, so
that describing the machine never compiles anything; ``threads`` is torch's intra-op thread count.
Only facts of the machine, no measurements (load averages are per-row fields of the benchmarks).
"""
from __future__ import annotations

import functools
import os
import platform
import sys

KEYS = ("cpu_model", "cpu_cores_logical", "cpu_cores_physical", "host_memory_gb", "isa", "threads", "device",
        "gpu_name", "gpu_memory_gb", "gpu_count", "gpu_capability", "gpu_driver", "cuda_version",
        "torch_version", "transformers_version", "magicpig_version", "python_version", "platform", "hostname")


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo; platform's processor or machine elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device) -> str:
    """The GPU's name for a CUDA device, else the CPU's model."""
    import torch

    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


def _version(module: str) -> str:
    try:
        return str(__import__(module).__version__)
    except Exception:  # noqa: BLE001 - a description, not a check
        return "unavailable"


def _isa(load_cpu_module: bool) -> str:
    from magicpig import cpu

    loaded = any(name.startswith("magicpig_cpu_") for name in sys.modules)
    if not (loaded or load_cpu_module):
        return "not loaded"
    try:
        return cpu.isa() if cpu.available() else "torch-fallback"
    except Exception as exc:  # noqa: BLE001
        return f"unavailable ({exc.__class__.__name__})"


def _gpu(dev) -> dict:
    import torch

    out = dict.fromkeys(("gpu_name", "gpu_memory_gb", "gpu_count", "gpu_capability", "gpu_driver"))
    if dev.type != "cuda":
        return out
    props = torch.cuda.get_device_properties(dev)
    out.update(gpu_name=props.name, gpu_memory_gb=round(props.total_memory / 1e9, 1),
               gpu_count=torch.cuda.device_count(), gpu_capability=f"{props.major}.{props.minor}", gpu_driver="")
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        out["gpu_driver"] = driver.decode() if isinstance(driver, bytes) else driver
    except Exception:  # noqa: BLE001 - optional
        pass
    return out


def machine_record(device: str | None = None, *, load_cpu_module: bool = False) -> dict:
    """The machine and software facts (keys: ``KEYS``, see the module docstring). ``device``: the device
    the work ran on (default: cuda when available, else cpu); GPU facts are of that device."""
    import psutil
    import torch

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    record = {
        "cpu_model": cpu_model(), "cpu_cores_logical": os.cpu_count(),
        "cpu_cores_physical": psutil.cpu_count(logical=False),
        "host_memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
        "isa": _isa(load_cpu_module), "threads": torch.get_num_threads(), "device": str(dev),
        **_gpu(dev),
        "cuda_version": torch.version.cuda or "",
        "torch_version": torch.__version__, "transformers_version": _version("transformers"),
        "magicpig_version": _version("magicpig"), "python_version": platform.python_version(),
        "platform": platform.platform(), "hostname": platform.node(),
    }
    return {k: record[k] for k in KEYS}
