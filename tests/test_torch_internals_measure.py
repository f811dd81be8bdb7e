"""The torch private APIs behind ``carb_nas.measure.torch_cpu_peak_bytes``, one test each.

After a torch upgrade, the failing test's name says which private piece is gone; the fix goes
into the matching function of ``carb_nas/_torch_internals.py`` (measure section).
"""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from carb_nas import _torch_internals as ti

N_FLOATS = 1 << 16  # a 256 KiB tensor: one allocation and one free of exactly that size


@pytest.fixture(scope="module")
def prof():
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        x = torch.ones(N_FLOATS)
        del x
    return p


def _walk(tree):
    stack = list(tree)
    while stack:
        ev = stack.pop()
        yield ev
        stack.extend(ev.children)


def test_private_kineto_results_experimental_event_tree(prof):
    """torch.profiler.profile().profiler.kineto_results.experimental_event_tree()"""
    tree = ti._event_tree(prof)
    assert isinstance(tree, list) and tree, "experimental_event_tree() returned no events"


def test_private_EventType_Allocation():
    """torch._C._profiler._EventType.Allocation"""
    from torch._C._profiler import _EventType

    assert ti._allocation_tag() is _EventType.Allocation


def test_private_event_fields_tag_start_time_children(prof):
    """event.tag, event.start_time_ns, event.children of the event tree"""
    for ev in _walk(ti._event_tree(prof)):
        assert isinstance(ev.start_time_ns, int)
        assert isinstance(ev.children, list)
        assert ev.tag is not None


def test_private_allocation_extra_fields_device_and_alloc_size(prof):
    """allocation event.extra_fields.device.type and .alloc_size (signed bytes)"""
    allocations = [ev for ev in _walk(ti._event_tree(prof)) if ev.tag == ti._allocation_tag()]
    assert allocations, "no allocation events with profile_memory=True"
    sizes = {
        int(ev.extra_fields.alloc_size)
        for ev in allocations
        if ev.extra_fields.device.type == "cpu"
    }
    assert {4 * N_FLOATS, -4 * N_FLOATS} <= sizes


def test_cpu_allocation_events_pairs_an_allocation_with_its_free(prof):
    events = ti.cpu_allocation_events(prof)
    sizes = [size for _, size in events]
    assert 4 * N_FLOATS in sizes and -4 * N_FLOATS in sizes
    assert sizes.index(4 * N_FLOATS) < sizes.index(-4 * N_FLOATS)  # recorded order
    assert all(isinstance(t, int) for t, _ in events)
