"""The plugin's own tests, in tiers (see each tier's ``__init__``; shared fixtures in ``conftest.py``).

unit/         one module at a time, imported directly; no pytest session, no kernel build
integration/  whole pytest sessions of a small suite (pytester, subprocesses, xdist)
kernels/      the kernel families: builds, CPU twins, emulated CUDA, controls
ci/           the repository itself: workflows, CI scripts, import hygiene

Every folder is a package so two tiers may hold test files of the same name.
"""
