from __future__ import annotations

from io import StringIO

from django.core.management import call_command

from agentsite.models import Membership, Team


def run_seed(**kwargs) -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out, **kwargs)
    return out.getvalue()


def test_seed_creates_team_and_owner_and_prints_the_password_once(db, monkeypatch, django_user_model):
    monkeypatch.delenv("DEMO_PASSWORD", raising=False)
    first = run_seed()
    assert "Log in as: demo / " in first
    password = first.split("Log in as: demo / ")[1].split()[0]
    user = django_user_model.objects.get(username="demo")
    assert user.check_password(password)
    assert Membership.objects.get(user=user).role == "owner"

    second = run_seed()
    assert password not in second
    assert Team.objects.filter(name="Demo team").count() == 1
    assert django_user_model.objects.filter(username="demo").count() == 1
    user.refresh_from_db()
    assert user.check_password(password)  # an existing account keeps its password


def test_seed_takes_the_password_from_the_environment(db, monkeypatch, django_user_model):
    monkeypatch.setenv("DEMO_PASSWORD", "from-the-env-123")
    run_seed()
    assert django_user_model.objects.get(username="demo").check_password("from-the-env-123")
    monkeypatch.setenv("DEMO_PASSWORD", "changed-later-456")
    run_seed()
    assert django_user_model.objects.get(username="demo").check_password("changed-later-456")
