"""The offline payload: a dataset folder packed and restored bit for bit, compactly, and damage detected."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest

from experiments.gpu_session.offline_payload import (
    _integer_encoding,
    _predictive_decoding,
    _predictive_encoding,
    join,
    main,
    pack,
    split,
    unpack,
)

h5py = pytest.importorskip("h5py")

ROOT = Path(__file__).resolve().parents[2]


def _dataset_folder(root):
    rng = np.random.default_rng(0)
    root.mkdir()
    # intensities k / max with integer k, as in the shared ACDC files; an uint8 label; floats of no such form
    k = rng.integers(0, 659, size=(3, 20, 18))
    k.flat[0] = 658
    ratio = (k / 658.0).astype(np.float32)
    with h5py.File(root / "patient001_frame01.h5", "w") as h5:
        h5.create_dataset("image", data=ratio, compression="gzip")
        h5.create_dataset("label", data=rng.integers(0, 4, size=(3, 20, 18)).astype(np.uint8))
        h5.create_dataset("noise", data=rng.normal(size=(4, 5)).astype(np.float32))
    (root / "images").mkdir()
    (root / "images" / "Case00.nii.gz").write_bytes(gzip.compress(rng.integers(0, 9, 4000).astype(np.uint16).tobytes()))
    (root / "README.md").write_text("notes\n")
    return root


def test_round_trip_is_bit_exact(tmp_path):
    src = _dataset_folder(tmp_path / "src")
    manifest = pack(src, tmp_path / "a.tar.xz")
    assert manifest["patient001_frame01.h5"]["datasets"]["image"]["divisor"] == 658
    assert manifest["patient001_frame01.h5"]["datasets"]["noise"]["divisor"] is None
    written = unpack(tmp_path / "a.tar.xz", tmp_path / "dst")
    assert sorted(p.relative_to(tmp_path / "dst").as_posix() for p in written) == [
        "README.md",
        "images/Case00.nii.gz",
        "patient001_frame01.h5",
    ]
    with h5py.File(src / "patient001_frame01.h5") as a, h5py.File(tmp_path / "dst" / "patient001_frame01.h5") as b:
        assert set(a) == set(b)
        for key in a:
            assert a[key].dtype == b[key].dtype
            np.testing.assert_array_equal(a[key][()].view(np.uint8), b[key][()].view(np.uint8))
    assert gzip.decompress((tmp_path / "dst/images/Case00.nii.gz").read_bytes()) == gzip.decompress(
        (src / "images/Case00.nii.gz").read_bytes()
    )
    assert (tmp_path / "dst/README.md").read_text() == "notes\n"


def test_ratio_images_are_stored_as_the_residual_of_16_bit_integers(tmp_path):
    src = _dataset_folder(tmp_path / "src")
    manifest = pack(src, tmp_path / "a.tar.xz")
    assert manifest["patient001_frame01.h5"]["datasets"]["image"]["predictor"] == "median_edge"
    assert manifest["patient001_frame01.h5"]["datasets"]["noise"]["predictor"] is None
    with h5py.File(src / "patient001_frame01.h5") as h5:
        k = np.rint(h5["image"][()].astype(np.float64) * 658).astype(np.uint16)
    with tarfile.open(tmp_path / "a.tar.xz") as tar:
        stored = np.load(io.BytesIO(tar.extractfile("patient001_frame01.h5/image.npy").read()))
        assert stored.dtype == np.uint8 and stored.shape == (2, 3, 20, 18)
        np.testing.assert_array_equal(_predictive_decoding(stored), k)
        assert np.load(io.BytesIO(tar.extractfile("patient001_frame01.h5/noise.npy").read())).dtype == np.float32


def test_median_edge_residual_by_hand():
    # one 2 x 3 plane; neighbours outside it are 0. Predictions: row 0 from its left pixel (a, with b = c = 0);
    # (1, 0) from above; (1, 1): a = 7, b = 12, c = 10 lies between them, so a + b - c = 9; (1, 2): a = 8, b = 11,
    # c = 12 >= max(a, b), so min(a, b) = 8
    k = np.array([[10, 12, 11], [7, 8, 65535]], np.uint16)
    residual = np.array([[10, 2, -1], [-3, -1, 65535 - 8 - 65536]])  # the last one wraps modulo 2**16
    zigzag = np.where(residual >= 0, 2 * residual, -2 * residual - 1)
    planes = _predictive_encoding(k)
    np.testing.assert_array_equal((planes[0].astype(np.int64) << 8) | planes[1], zigzag)
    np.testing.assert_array_equal(_predictive_decoding(planes), k)


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (6, 1), (2, 5, 9), (3, 2, 17, 4)])
def test_median_edge_round_trip_over_the_whole_range(shape):
    rng = np.random.default_rng(1)
    k = rng.integers(0, 65536, size=shape, dtype=np.uint16)
    k.flat[0], k.flat[-1] = 0, 65535
    np.testing.assert_array_equal(_predictive_decoding(_predictive_encoding(k)), k)


def test_archives_packed_before_the_predictor_still_unpack(tmp_path):
    # an older archive: the integers stored as they are and no "predictor" key in the manifest
    src = _dataset_folder(tmp_path / "src")
    pack(src, tmp_path / "a.tar.xz")
    with tarfile.open(tmp_path / "a.tar.xz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    manifest = json.loads(members["manifest.json"])
    image = manifest["patient001_frame01.h5"]["datasets"]["image"]
    del image["predictor"]
    stored = _predictive_decoding(np.load(io.BytesIO(members["patient001_frame01.h5/image.npy"])))
    buffer = io.BytesIO()
    np.save(buffer, stored)
    members["patient001_frame01.h5/image.npy"] = buffer.getvalue()
    members["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(tmp_path / "old.tar.xz", "w:xz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    unpack(tmp_path / "old.tar.xz", tmp_path / "dst")
    with h5py.File(src / "patient001_frame01.h5") as a, h5py.File(tmp_path / "dst" / "patient001_frame01.h5") as b:
        np.testing.assert_array_equal(a["image"][()].view(np.uint32), b["image"][()].view(np.uint32))


def test_integer_encoding_refuses_what_it_cannot_restore():
    assert _integer_encoding(np.array([0.0, 0.5, 1.0], dtype=np.float64)) is None  # not float32
    assert _integer_encoding(np.array([0.0, np.nan], dtype=np.float32)) is None
    assert _integer_encoding(np.array([0.1, 0.35, 0.2], dtype=np.float32)) is None  # no common step
    k, divisor = _integer_encoding(np.array([0.0, 1 / 3, 2 / 3, 1.0], dtype=np.float32))
    assert divisor == 3 and k.tolist() == [0, 1, 2, 3]


def test_damaged_archive_is_refused(tmp_path):
    src = _dataset_folder(tmp_path / "src")
    pack(src, tmp_path / "a.tar.xz")
    with tarfile.open(tmp_path / "a.tar.xz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    members["README.md"] = b"other\n"
    with tarfile.open(tmp_path / "b.tar.xz", "w:xz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    with pytest.raises(ValueError, match="README.md does not restore"):
        unpack(tmp_path / "b.tar.xz", tmp_path / "dst")


def test_empty_or_missing_source(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty"):
        pack(tmp_path / "empty", tmp_path / "a.tar.xz")
    with pytest.raises(FileNotFoundError, match="missing"):
        pack(tmp_path / "missing", tmp_path / "a.tar.xz")


def test_setup_script_names_a_missing_payload(tmp_path):
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "offline_setup.sh"
    done = subprocess.run(
        ["bash", "-c", f"source {script} {tmp_path / 'nothing'}; echo sourced $?"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert "sourced 1" in done.stdout
    assert f"{tmp_path / 'nothing'}/wheels not found" in done.stderr


def test_attributes_are_refused_not_dropped(tmp_path):
    (tmp_path / "src").mkdir()
    with h5py.File(tmp_path / "src" / "a.h5", "w") as h5:
        h5.create_dataset("image", data=np.zeros((2, 2), dtype=np.float32)).attrs["spacing"] = (1.5, 1.5)
    with pytest.raises(ValueError, match="'image' has attributes"):
        pack(tmp_path / "src", tmp_path / "a.tar.xz")


def test_a_payload_cut_to_some_patients_keeps_their_files_and_those_of_no_patient(tmp_path):
    src = _dataset_folder(tmp_path / "src")
    (src / "training" / "patient002").mkdir(parents=True)
    (src / "training" / "patient002" / "Info.cfg").write_text("Group: NOR\n")
    (src / "training" / "patient003").mkdir()
    (src / "training" / "patient003" / "Info.cfg").write_text("Group: DCM\n")
    with h5py.File(src / "patient004_frame01.h5", "w") as h5:
        h5.create_dataset("label", data=np.zeros((2, 3), np.uint8))
    manifest = pack(src, tmp_path / "cut.tar.xz", patients=["patient001", "patient003"])
    assert sorted(manifest) == [
        "README.md",
        "images/Case00.nii.gz",
        "patient001_frame01.h5",
        "training/patient003/Info.cfg",
    ]
    written = unpack(tmp_path / "cut.tar.xz", tmp_path / "dst")
    assert len(written) == 4 and (tmp_path / "dst" / "training" / "patient003" / "Info.cfg").read_text() == (
        "Group: DCM\n"
    )


def _random_archive(path: Path, size: int = 10_000) -> bytes:
    data = np.random.default_rng(2).integers(0, 256, size, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    return data


def test_split_and_join_restore_a_packed_archive_bit_for_bit(tmp_path):
    archive = tmp_path / "payload" / "acdc.tar.xz"
    pack(_dataset_folder(tmp_path / "src"), archive)
    original = archive.read_bytes()
    manifest = split(archive, 3)
    names = [f"acdc.tar.xz.part{i}" for i in range(3)]
    assert [entry["name"] for entry in manifest["parts"]] == names
    # as equal as bytes allow, the first ones a byte longer
    size, longer = divmod(len(original), 3)
    assert [entry["bytes"] for entry in manifest["parts"]] == [size + (i < longer) for i in range(3)]
    assert b"".join((archive.parent / name).read_bytes() for name in names) == original
    assert json.loads((tmp_path / "payload" / "acdc.tar.xz.parts.json").read_text()) == manifest
    archive.unlink()
    assert join(tmp_path / "payload" / "acdc.tar.xz.parts.json") == archive
    assert archive.read_bytes() == original
    assert len(unpack(archive, tmp_path / "dst")) == 3


def test_a_new_split_removes_the_parts_of_an_earlier_one(tmp_path):
    archive = tmp_path / "a.tar.xz"
    data = _random_archive(archive)
    split(archive, 3)
    (tmp_path / "a.tar.xz.part10").write_bytes(b"x")  # an earlier split's, as its name says
    (tmp_path / "a.tar.xz.part1.bak").write_bytes(b"y")  # not a part: stays
    split(archive, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.tar.xz",
        "a.tar.xz.part0",
        "a.tar.xz.part1",
        "a.tar.xz.part1.bak",
        "a.tar.xz.parts.json",
    ]
    assert (tmp_path / "a.tar.xz.part0").read_bytes() + (tmp_path / "a.tar.xz.part1").read_bytes() == data


def test_join_names_the_missing_parts_and_writes_nothing(tmp_path):
    archive = tmp_path / "a.tar.xz"
    _random_archive(archive)
    split(archive, 3)
    archive.unlink()
    (tmp_path / "a.tar.xz.part0").unlink()
    (tmp_path / "a.tar.xz.part2").unlink()
    with pytest.raises(FileNotFoundError) as refused:
        join(tmp_path / "a.tar.xz.parts.json")
    message = str(refused.value)
    assert f"2 of 3 parts missing: {tmp_path / 'a.tar.xz.part0'}, {tmp_path / 'a.tar.xz.part2'}." in message
    assert "Send them again" in message and "went back between calls" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar.xz.part1", "a.tar.xz.parts.json"]


def test_join_names_a_damaged_part_and_writes_nothing(tmp_path):
    archive = tmp_path / "a.tar.xz"
    _random_archive(archive)
    split(archive, 3)
    archive.unlink()
    part = tmp_path / "a.tar.xz.part1"
    damaged = bytearray(part.read_bytes())
    damaged[100] ^= 1  # one bit, the size unchanged
    part.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="damaged parts") as refused:
        join(tmp_path / "a.tar.xz.parts.json")
    message = str(refused.value)
    assert f"{part} (3333 bytes" in message and "a.tar.xz.part0" not in message and "a.tar.xz.part2" not in message
    assert message.endswith("Send them again.")
    part.write_bytes(bytes(damaged[:-1]))  # a part cut short
    with pytest.raises(ValueError, match=f"{part.name} \\(3332 bytes"):
        join(tmp_path / "a.tar.xz.parts.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.tar.xz.part0",
        "a.tar.xz.part1",
        "a.tar.xz.part2",
        "a.tar.xz.parts.json",
    ]


def test_join_refuses_parts_of_another_split(tmp_path):
    archive = tmp_path / "a.tar.xz"
    _random_archive(archive)
    manifest = split(archive, 2)
    archive.unlink()
    manifest["sha256"] = "0" * 64  # every part matches its own entry, the whole another archive's
    (tmp_path / "a.tar.xz.parts.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="come from different splits"):
        join(tmp_path / "a.tar.xz.parts.json")
    assert not archive.exists() and not (tmp_path / "a.tar.xz.joining").exists()


def test_split_and_join_commands(tmp_path, capsys):
    archive = tmp_path / "a.tar.xz"
    data = _random_archive(archive)
    main(["split", str(archive), "--max-bytes", "4000"])  # 10,000 bytes: 3 parts of 3334, 3333 and 3333
    assert [len((tmp_path / f"a.tar.xz.part{i}").read_bytes()) for i in range(3)] == [3334, 3333, 3333]
    assert not (tmp_path / "a.tar.xz.part3").exists()
    assert f"Remove {archive}" in capsys.readouterr().out
    main(["split", str(archive), "--parts", "2"])
    assert not (tmp_path / "a.tar.xz.part2").exists()
    archive.unlink()
    main(["join", str(tmp_path / "a.tar.xz.parts.json")])
    assert archive.read_bytes() == data
    archive.unlink()
    (tmp_path / "a.tar.xz.part1").unlink()
    with pytest.raises(SystemExit, match="offline_payload join: .*1 of 2 parts missing: .*a.tar.xz.part1"):
        main(["join", str(tmp_path / "a.tar.xz.parts.json")])
    with pytest.raises(SystemExit, match="cannot be cut into 20000 non-empty parts"):
        main(["split", str(tmp_path / "a.tar.xz.part0"), "--parts", "20000"])


def _data_script(payload: Path, data_root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "offline_data.sh"), str(payload), str(data_root)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_setup_joins_an_archive_sent_in_parts_then_unpacks_it(tmp_path):
    src = _dataset_folder(tmp_path / "src")
    archive = tmp_path / "payload" / "data" / "acdc.tar.xz"
    pack(src, archive)
    original = archive.read_bytes()
    split(archive, 2)
    archive.unlink()
    done = _data_script(tmp_path / "payload", tmp_path / "data")
    assert done.returncode == 0, done.stderr
    assert archive.read_bytes() == original
    with h5py.File(src / "patient001_frame01.h5") as a, h5py.File(tmp_path / "data/acdc/patient001_frame01.h5") as b:
        np.testing.assert_array_equal(a["image"][()].view(np.uint32), b["image"][()].view(np.uint32))
    assert (tmp_path / "data" / "acdc" / "README.md").read_text() == "notes\n"


def test_setup_names_a_missing_part_and_unpacks_nothing(tmp_path):
    archive = tmp_path / "payload" / "data" / "acdc.tar.xz"
    pack(_dataset_folder(tmp_path / "src"), archive)
    split(archive, 2)
    archive.unlink()
    (tmp_path / "payload" / "data" / "acdc.tar.xz.part0").unlink()  # the machine went back after the first call
    done = _data_script(tmp_path / "payload", tmp_path / "data")
    assert done.returncode == 1
    assert f"1 of 2 parts missing: {tmp_path / 'payload/data/acdc.tar.xz.part0'}." in done.stderr
    assert "Send them again" in done.stderr
    assert not (tmp_path / "data").exists() and not archive.exists()
    # a dataset already unpacked on the machine (an earlier call) needs no parts
    (tmp_path / "data" / "acdc").mkdir(parents=True)
    assert _data_script(tmp_path / "payload", tmp_path / "data").returncode == 0
