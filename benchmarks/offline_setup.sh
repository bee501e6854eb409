# Prepares an offline machine for the benchmarks, from the folder made by experiments/gpu_session/offline_payload.py.
# Source it from the repository's root:  source benchmarks/offline_setup.sh [PAYLOAD]   (default: .offline)
#   - installs PAYLOAD/wheels/*.whl into /tmp/gcl-site (no index, no dependencies: the machine's own torch stays),
#   - joins every archive sent in parts (PAYLOAD/data/NAME.tar.xz.parts.json, its parts checked: a missing or damaged
#     part is named, to be sent again) and unpacks every PAYLOAD/data/NAME.tar.xz into /tmp/gcl-data/NAME (skipped
#     when already there): benchmarks/offline_data.sh,
#   - exports PYTHONPATH (the wheels and this checkout) and GCL_DATA_ROOT=/tmp/gcl-data.
# docs/benchmark.md, "On an offline GPU machine", has the whole procedure.

_payload="${1:-.offline}"
if [ ! -d "$_payload/wheels" ]; then
    echo "offline_setup: $_payload/wheels not found (make it with python -m experiments.gpu_session.offline_payload wheels)" >&2
    return 1 2>/dev/null || exit 1
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gcl-site \
    "$_payload"/wheels/*.whl || { return 1 2>/dev/null || exit 1; }
export PYTHONPATH="/tmp/gcl-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export GCL_DATA_ROOT=/tmp/gcl-data
bash "$PWD/benchmarks/offline_data.sh" "$_payload" "$GCL_DATA_ROOT" || { return 1 2>/dev/null || exit 1; }
python3 -c "import torch, monai, ignite, gcl_monai; print('offline_setup: torch', torch.__version__, 'cuda',
torch.cuda.is_available(), 'monai', monai.__version__, 'ignite', ignite.__version__, 'data', '$GCL_DATA_ROOT')"
