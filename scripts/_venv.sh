# Sourced by scripts/demo and scripts/test: create or reuse .venv and install what stepscope needs.
# Reinstalls only when pyproject.toml or this file changed since the last install.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python_bin="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x "$venv/bin/python" ]; then
  echo "stepscope: creating virtualenv in .venv ($("$python_bin" --version))" >&2
  "$python_bin" -m venv "$venv"
fi
stamp="$venv/.stepscope-installed"
want="$(cat "$root/pyproject.toml" "$root/scripts/_venv.sh" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "stepscope: installing stepscope and its test tools into .venv" >&2
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  # torch is pinned for tests and the demo, and installed on its own first: resolved together
  # with the test extra, pip prefers the registry's CUDA build over the local CPU wheel.
  # Users pick their own torch through the extra.
  "$venv/bin/python" -m pip install --quiet "torch==2.13.0"
  "$venv/bin/python" -m pip install --quiet -e "$root[test]"
  echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
