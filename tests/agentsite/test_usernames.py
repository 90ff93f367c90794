"""Usernames that impersonate are refused on sign-up (``agentsite.usernames``): invisible and
bidi characters, markup, mixed scripts, look-alikes of existing names."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from agentsite.forms import TeamForm
from agentsite.usernames import skeleton, username_problem

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("name", "why"), [
    ("ali\u200bce", "invisible"),          # zero-width space
    ("alice\u200d", "invisible"),          # zero-width joiner
    ("\u202eecila", "invisible"),          # right-to-left override
    ("bob\u2066x", "invisible"),           # left-to-right isolate
    ("<b>bob</b>", "letters, digits"),
    ("al\"ice", "letters, digits"),
    ("tom&jerry", "letters, digits"),
    ("a lice", "spaces"),
    ("\u0430lice", "one script"),          # Cyrillic а + Latin lice
    ("p\u0430ypal", "one script"),
])
def test_impersonating_names_are_refused(name, why):
    problem = username_problem(name)
    assert problem and why in problem, (name, problem)


@pytest.mark.parametrize("name", ["\u0441\u043e\u0441\u043e\u0430", "COCOA", "Cocoa"])
def test_look_alikes_of_an_existing_name_are_taken(name):
    assert "looks the same" in username_problem(name, existing=["cocoa"])


@pytest.mark.parametrize(("name", "existing"), [
    ("al\u0131ce", "alice"),      # Latin dotless ı
    ("b\u0131b", "bib"),
    ("demo\u0131", "demoi"),
    ("alic\u00e9", "alice"),      # é: what NFKC makes of alice + U+0301
    ("\u0251lice", "alice"),      # Latin alpha
])
def test_look_alikes_within_latin_are_taken_too(name, existing):
    assert "looks the same" in username_problem(name, existing=[existing])


def test_signup_refuses_a_dotless_i_look_alike_and_a_combining_accent(client, alice, settings):
    settings.OPEN_SIGNUP = True
    for name in ("al\u0131ce", "alice\u0301"):
        response = client.post(reverse("signup"), {"username": name, "password1": "a-Long-pass-123!",
                                                   "password2": "a-Long-pass-123!", "team_name": "X"})
        # (PostgreSQL's case-insensitive match already takes alıce for alice: "is taken" either way)
        assert response.status_code == 200 and "username is taken" in response.content.decode(), name
    assert get_user_model().objects.filter(username__startswith="al").count() == 1


@pytest.mark.parametrize("name", ["alice", "josé", "Дмитрий", "山田", "o'neil".replace("'", "_"), "ana.maria+test@x"])
def test_ordinary_names_of_any_script_pass(name):
    assert username_problem(name, existing=["bob"]) is None


def test_skeleton_maps_look_alikes_to_latin():
    assert skeleton("\u0441\u043e\u0441\u043e\u0430") == skeleton("cocoa") == "cocoa"


def test_signup_refuses_a_cyrillic_look_alike_of_a_teammate(client, alice, settings):
    settings.OPEN_SIGNUP = True
    response = client.post(reverse("signup"), {"username": "\u0430lice", "password1": "a-Long-pass-123!",
                                               "password2": "a-Long-pass-123!", "team_name": "X"})
    assert response.status_code == 200 and "one script" in response.content.decode()
    assert not get_user_model().objects.filter(username="\u0430lice").exists()


@pytest.mark.parametrize(("name", "ok"), [("Acme Research", True), ("Équipe Ω", False), ("Ops\u202e", False),
                                          ("Команда", True), ("Pаyments", False)])
def test_team_names_refuse_invisible_characters_and_mixed_scripts(name, ok):
    assert TeamForm({"name": name}).is_valid() is ok
