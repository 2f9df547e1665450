#!/usr/bin/env bash
# The vllm job: the rules plugin inside the real vLLM package (CPU wheel; no GPU needed), in a venv of
# its own so the main one stays light. .ci/run runs it on the newest release [vllm] admits; run it on
# the study's release with `bash tests/vllm_job/run_job.sh 0.26.0 .venv-vllm026`.
# Usage: bash tests/vllm_job/run_job.sh [VLLM_VERSION [VENV]]   (defaults: newest admitted, .venv-vllm)
set -euo pipefail
cd "$(dirname "$0")/../.."
version="${1:-}"
venv="${2:-.venv-vllm}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
start=$(date +%s)
if [ -n "$version" ]; then
  "$venv/bin/python" -m pip install -q -e ".[vllm,test]" "vllm==$version"
else
  "$venv/bin/python" -m pip install -q -e ".[vllm,test]"
fi
installed=$("$venv/bin/python" -c 'import vllm; print(vllm.__version__)' 2>/dev/null | tail -n 1)
echo "vllm job: vLLM $installed installed in $(( $(date +%s) - start )) s"
"$venv/bin/python" -m pytest -m vllm -n 0 tests/vllm_job  # one process: the job loads vLLM once
