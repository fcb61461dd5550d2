"""The `devplace probe` flags that turn every vendor library off, for run.py and neuron_xla.py, which
probe fixture hosts with the sysfs/procfs probers only. Read from `devplace probe --help` (its
`--<name>_library` flags are the registry's, server/common/vendor_libraries.h), never written out
here, so a library added to the registry is off here by itself."""
import re
import subprocess


def no_vendor_libraries(devplace):
    """["--nvml_library=", "--cuda_library=", ...]: each --<name>_library flag of `devplace probe`, empty."""
    text = subprocess.run([devplace, "probe", "--help"], check=True, capture_output=True, text=True).stdout
    flags = list(dict.fromkeys(re.findall(r"--(\w+_library)=", text)))
    if not flags:
        raise SystemExit(f"{devplace} probe --help lists no --<name>_library flag")
    return [f"--{flag}=" for flag in flags]
