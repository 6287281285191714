# Sourced by the scripts: create the venv VENV (default .venv) with PYTHON (default python3) if
# needed, install the project with its CLI extra and the dependency groups in DEP_GROUPS (default:
# all of them, "dev") into it, then a portable llama-server unless LLAMA_SERVER=0
# (devtools/build_server.py: built once into ~/.cache/llamaclient, never taken from pip's cache,
# which ignores CMake flags).
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade "pip>=25.1" 2>&1 | grep -v "^WARNING: Location" || true
group_args=()
for group in ${DEP_GROUPS:-dev}; do group_args+=(--group "$group"); done
"$VENV/bin/python" -m pip install -q -e ".[cli]" "${group_args[@]}" 2>&1 \
    | grep -v "^WARNING: Location" || true
if [ "${LLAMA_SERVER:-1}" = 1 ]; then
    "$VENV/bin/python" -m devtools.build_server >/dev/null
fi
export PATH="$PWD/$VENV/bin:$PATH"
