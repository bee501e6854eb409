# Restores the datasets of the folder made by experiments/gpu_session/offline_payload.py; benchmarks/offline_setup.sh
# runs it. From the repository's root:  bash benchmarks/offline_data.sh PAYLOAD DATA_ROOT
#   - joins every PAYLOAD/data/NAME.tar.xz.parts.json (an archive sent in parts over several calls: offline_payload
#     split) whose archive is absent and DATA_ROOT/NAME not yet unpacked, every part's SHA-256 checked (a missing or
#     damaged part: named, to be sent again, and exit 1),
#   - unpacks every PAYLOAD/data/NAME.tar.xz into DATA_ROOT/NAME (skipped when already there).

if [ $# -ne 2 ]; then
    echo "usage: bash benchmarks/offline_data.sh PAYLOAD DATA_ROOT" >&2
    exit 2
fi
payload="$1"
data_root="$2"
for manifest in "$payload"/data/*.tar.xz.parts.json; do
    [ -e "$manifest" ] || continue
    archive="${manifest%.parts.json}"
    name="$(basename "$archive" .tar.xz)"
    if [ ! -e "$archive" ] && [ ! -d "$data_root/$name" ]; then
        python3 -m experiments.gpu_session.offline_payload join "$manifest" || exit 1
    fi
done
for archive in "$payload"/data/*.tar.xz; do
    [ -e "$archive" ] || continue
    name="$(basename "$archive" .tar.xz)"
    if [ ! -d "$data_root/$name" ]; then
        python3 -m experiments.gpu_session.offline_payload unpack "$archive" "$data_root/$name.partial" &&
            mv "$data_root/$name.partial" "$data_root/$name" || exit 1
    fi
done
