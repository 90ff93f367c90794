"""The admin's "view on site" redirect is no oracle for another team's objects."""

from __future__ import annotations

import pytest
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse

from agents.models import Agent

pytestmark = pytest.mark.django_db


def test_another_teams_object_is_a_404_like_a_missing_one(client_for, alice, charlie, agent):
    ct = ContentType.objects.get_for_model(Agent)
    url = reverse("admin:view_on_site", args=[ct.pk, agent.pk])
    missing = reverse("admin:view_on_site", args=[ct.pk, agent.pk + 1000])
    existing, absent = client_for(charlie).get(url), client_for(charlie).get(missing)
    assert existing.status_code == absent.status_code == 404
    assert agent.name.encode() not in existing.content and b"Content type" not in existing.content
