"""`python -m loom`: the build configuration of the package and its libloom —
version, where they are, what the library was built with, the devices it
finds and the CPU instruction set its kernels use."""
import sys

import loom


def report():
    info = loom.build_info()
    lines = [f"loom {loom.__version__} (Python package {loom.__file__.rsplit('/', 1)[0]})",
             f"library: {loom.library_path} (libloom {info.pop('version', '?')})"]
    built = [k for k, v in info.items() if v is True]
    missing = [k for k, v in info.items() if v is False]
    lines.append("built with: " + (", ".join(built) or "nothing optional"))
    lines.append("built without: " + (", ".join(missing) or "nothing"))
    n = loom.cuda_device_count()
    if n:
        lines.append(f"devices: cpu, {n} CUDA device(s): " + ", ".join(f"cuda:{i}" for i in range(n)))
    else:
        lines.append(f"devices: cpu (CUDA: {loom.cuda_unavailable_reason()})")
    lines.append(f"cpu: {loom.cpu_isa()} kernels, GEMM {loom._lib.loom_cpu_gemm_name().decode()}, "
                 f"{loom.get_num_threads()} threads")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
    sys.exit(0)
