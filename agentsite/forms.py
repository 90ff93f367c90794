from __future__ import annotations

from datetime import datetime, time

from django import forms
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.forms import UsernameField
from django.utils import timezone

from .models import ApiKey, Membership
from .usernames import display_name_problem, username_problem

User = get_user_model()
Role = Membership.Role


class TeamForm(forms.Form):
    name = forms.CharField(max_length=100, widget=forms.TextInput(attrs={"autocomplete": "off"}))

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        problem = display_name_problem(name)
        if problem:
            raise forms.ValidationError(problem)
        return name


class InvitationForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)
    email = forms.EmailField(required=False, help_text="Optional, for your own records.")

    def __init__(self, *args, actor_role: str = Role.OWNER, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Nobody can hand out a role above their own.
        self.fields["role"].choices = [
            (value, label) for value, label in Role.choices if Membership.rank(value) <= Membership.rank(actor_role)
        ]


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


# The largest limit a PositiveIntegerField holds on every database.
LIMIT_MAX = 2_147_483_647


def limit_field(label: str) -> forms.IntegerField:
    return forms.IntegerField(label=label, required=False, min_value=1, max_value=LIMIT_MAX,
                              widget=forms.NumberInput(attrs={"min": 1, "placeholder": "No limit"}))


class LimitsForm(forms.Form):
    """A person's (or a key's) requests and tokens per minute; empty is no limit."""

    rpm_limit = limit_field("Requests per minute")
    tpm_limit = limit_field("Tokens per minute")


class ApiKeyForm(LimitsForm):
    """A new API key. Every scope is accepted here: which ones the person's role allows is the
    service's rule (``api_key_create``), which refuses the others with a 403."""

    name = forms.CharField(max_length=100, widget=forms.TextInput(attrs={"autocomplete": "off"}),
                           help_text="Where the key is used, e.g. “nightly report script”.")
    kind = forms.ChoiceField(choices=ApiKey.Kind.choices, required=False, initial=ApiKey.Kind.PERSONAL)
    scopes = forms.MultipleChoiceField(choices=ApiKey.Scope.choices, widget=forms.CheckboxSelectMultiple,
                                       error_messages={"required": "Choose at least one scope for the key."})
    expires_on = forms.DateField(label="Expiry date", required=False,
                                 widget=forms.DateInput(attrs={"type": "date"}),
                                 help_text="Optional: the key stops working at the end of this day.")

    require_end_user = forms.BooleanField(
        label="Require an end user", required=False,
        help_text="Every call must name the end user of your application it is for (user, or the "
                  "X-Agentsite-End-User header): their memory and conversations are kept apart.")

    end_user_rpm_limit = limit_field("Requests per minute per end user")
    end_user_tpm_limit = limit_field("Tokens per minute per end user")

    field_order = ["name", "kind", "scopes", "expires_on", "rpm_limit", "tpm_limit", "require_end_user",
                   "end_user_rpm_limit", "end_user_tpm_limit"]

    def clean_kind(self) -> str:
        return self.cleaned_data.get("kind") or ApiKey.Kind.PERSONAL

    def clean_expires_on(self):
        day = self.cleaned_data.get("expires_on")
        if day is not None and day < timezone.localdate():
            raise forms.ValidationError("The expiry date is in the past.")
        return day

    @property
    def expires_at(self) -> datetime | None:
        """The last moment of the chosen day, in the site's time zone (so lists show that day)."""
        day = self.cleaned_data.get("expires_on")
        if day is None:
            return None
        return timezone.make_aware(datetime.combine(day, time.max))


class SignupForm(forms.Form):
    """A new account. Used on an invitation page and, when open sign-up is enabled, alone."""

    username = UsernameField(max_length=150, widget=forms.TextInput(attrs={"autocomplete": "username", "autofocus": True}))
    email = forms.EmailField(required=False, widget=forms.EmailInput(attrs={"autocomplete": "email"}))
    password1 = forms.CharField(label="Password", strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))
    password2 = forms.CharField(label="Password again", strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))

    def clean_username(self) -> str:
        username = self.cleaned_data["username"]
        if User.objects.filter(username__iexact=username).exists():
            raise forms.ValidationError("That username is taken. Choose another, or log in if it is yours.")
        problem = username_problem(username, User.objects.values_list("username", flat=True).iterator())
        if problem:
            raise forms.ValidationError(problem)
        return username

    def clean(self) -> dict:
        data = super().clean()
        p1, p2 = data.get("password1"), data.get("password2")
        if p1 and p2 and p1 != p2:
            self.add_error("password2", "The two passwords differ.")
        if p1:
            candidate = User(username=data.get("username") or "", email=data.get("email") or "")
            try:
                password_validation.validate_password(p1, candidate)
            except forms.ValidationError as exc:
                self.add_error("password1", exc)
        return data
