"""core: what every layer shares, and nothing of translation itself.

Imports nothing of attncli outside this package; everything else may import it. Modules, in
reading order:

    version.py       attncli's version (the package, the CLI, model cards, exports)
    errors.py        AttncliError (a problem the user can fix: exit 2) and who reports it
    files.py         crash-safe writes (files, whole folders), the one write probe, and the
                     lock of an entry several processes may build (`entry_lock`)
    text.py          the special token ids and language codes (base language, scripts)
    scripts.py       the writing system of each language, for the `script` filter
    config.py        the config's schema: typed, validated sections and their defaults
    config_files.py  YAML files -> a `Config`, with --set overrides, and back
    device.py        the device and numeric precision for train, eval and bench, and the
                     machine a run trained on
    licences.py      a data licence: an SPDX identifier or free text, and what it restricts
    console.py       standard output that may not be UTF-8, JSON lines, the training display
    plots.py         learning curves and attention heatmaps as PNG
    malloc.py        glibc malloc tuning, before any command runs
    kernel_caches.py a bound on ideep's cache of compiled kernels, before torch loads
    memory.py        the process's resident memory, now and at its peak, for logs and bench
    host.py          the CPUs this process may use (affinity, cgroup quota), before torch loads,
                     and which CPU they are (/proc/cpuinfo: family, model, flags)
    cpu_kind.py      which kind of CPU the products run on (AMX, AVX-512-BF16, AVX-512,
                     AVX2, other), capped by the environment: what `precision: auto` reads
    calibration.py   a short matrix-product measurement of the machine a run starts on
    machine_load.py  what other processes take of this process's CPUs (/proc/stat), for bench
"""
