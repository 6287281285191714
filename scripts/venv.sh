# Sourced by the scripts: create .venv if needed, install the project into it, and install a
# portable llama-server (devtools/build_server.py: built once into ~/.cache/llamaclient, never
# taken from pip's cache, which ignores CMake flags).
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
fi
.venv/bin/python -m pip install -q -e ".${EXTRAS:-[test,lint,live,bench,demo]}" 2>&1 \
    | grep -v "^WARNING: Location" || true
if [ "${LLAMA_SERVER:-1}" = 1 ]; then
    .venv/bin/python -m devtools.build_server >/dev/null
fi
export PATH="$PWD/.venv/bin:$PATH"
