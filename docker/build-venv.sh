#!/bin/sh
# Build gpufleet's runtime virtual environment at $1 from the source tree in the current folder: the pinned
# dependencies of docker/requirements.txt (nothing else is resolved), then gpufleet without dependencies, then
# `pip check`, then pip and setuptools are removed (nothing installs at run time). The Dockerfile's build stage runs
# this; tests/test_dockerfile.py runs it too, so the image's Python layer is tested without docker.
# PYTHON names the interpreter (default: python3).
set -eu
venv="$1"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --require-virtualenv \
    -r docker/requirements.txt
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --require-virtualenv .
"$venv/bin/python" -m pip check --disable-pip-version-check
"$venv/bin/python" -m pip uninstall --quiet --disable-pip-version-check --yes pip setuptools
# Bytecode compiled now, once, with fixed timestamps in the source (SOURCE_DATE_EPOCH), not by the first run
# in a read-only container.
"$venv/bin/python" -m compileall -q -j 0 --invalidation-mode unchecked-hash "$venv/lib"
