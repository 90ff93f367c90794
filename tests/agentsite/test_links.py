"""Row links built from a pattern reversed once are the addresses ``reverse`` gives."""

from __future__ import annotations

import uuid

import pytest
from django.urls import NoReverseMatch, reverse, set_script_prefix

from agentsite.links import link


def test_a_link_is_the_address_reverse_gives():
    for _ in range(3):
        first, second = uuid.uuid4(), uuid.uuid4()
        assert link("trace_detail", first) == reverse("trace_detail", args=[first])
        assert link("message_edit", first, second) == reverse("message_edit", args=[first, second])
    assert link("home") == reverse("home") and link("costs") == reverse("costs")


def test_other_arguments_go_through_reverse_and_fail_as_it_does():
    code = uuid.uuid4()
    assert link("step_detail", code, 7) == reverse("step_detail", args=[code, 7])
    assert link("trace_detail", str(code)) == reverse("trace_detail", args=[str(code)])
    with pytest.raises(NoReverseMatch):
        link("attachment", code, "not-a-uuid")


def test_a_site_under_a_path_gets_its_prefix():
    code = uuid.uuid4()
    try:
        set_script_prefix("/agents/")
        assert link("trace_detail", code) == f"/agents/traces/{code}/" == reverse("trace_detail", args=[code])
    finally:
        set_script_prefix("/")
    assert link("trace_detail", code) == f"/traces/{code}/"
