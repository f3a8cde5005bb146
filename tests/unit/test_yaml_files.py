"""YAML files the pipeline reads: bounded by size before a byte is parsed."""

from __future__ import annotations

from pathlib import Path

import pytest

from thetalker.data.yaml_files import MAX_YAML_BYTES, YamlFileError, load_yaml_mapping


def test_a_file_past_the_size_bound_is_refused_before_it_is_parsed(tmp_path: Path):
    # A 52 MB deploy file made a dry run take 42 s in the pure-Python parser.
    path = tmp_path / "deploy.yaml"
    path.write_bytes(b"workers: 1\n" + b"# padding\n" * (MAX_YAML_BYTES // 10))
    with pytest.raises(YamlFileError) as info:
        load_yaml_mapping(path, "deploy file")
    size = path.stat().st_size
    assert str(info.value) == (
        f"{path}: {size} bytes, more than {MAX_YAML_BYTES} (256 KiB); no deploy file is that "
        "large; refused before reading it"
    )
    path.write_bytes(b"workers: 1\n" + b"#" * (MAX_YAML_BYTES - 12) + b"\n")  # at the bound
    assert load_yaml_mapping(path, "deploy file") == {"workers": 1}
