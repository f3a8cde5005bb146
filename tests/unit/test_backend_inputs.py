"""The protocols a server kind reads (thetalker.backends.inputs) are what the client's options
and the lifecycle's spec are: every field they name exists there, typed the same."""

from __future__ import annotations

import dataclasses

import pytest

from thetalker.backends.inputs import DEFAULT_EXECUTABLE, LaunchSpec, RequestOptions
from thetalker.client.options import BenchOptions
from thetalker.lifecycle.launch import ServerSpec


def protocol_fields(protocol: type) -> dict[str, str]:
    """Each property of `protocol` and its return annotation (a string: postponed)."""
    return {
        name: value.fget.__annotations__["return"]
        for name, value in vars(protocol).items()
        if isinstance(value, property)
    }


@pytest.mark.parametrize(
    ("protocol", "cls", "instance"),
    [
        (RequestOptions, BenchOptions, BenchOptions()),
        (LaunchSpec, ServerSpec, ServerSpec(launcher="local", model_id="piper-joe")),
    ],
    ids=["RequestOptions", "LaunchSpec"],
)
def test_the_protocol_is_the_class_it_stands_for(protocol, cls, instance):
    fields = {f.name: f.type for f in dataclasses.fields(cls)}
    read = protocol_fields(protocol)
    assert read, "a protocol with no fields checks nothing"
    assert {name: fields.get(name) for name in read} == read
    assert isinstance(instance, protocol)


def test_a_spec_runs_the_default_program_unless_told():
    assert ServerSpec(launcher="vllm-omni", model_id="m").executable == DEFAULT_EXECUTABLE
