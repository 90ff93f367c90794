"""Memory entries in the admin: search, filter, edit and bulk delete, scoped to the user's teams
and audited. Entries written here have no source turn; agent-wide memory (everyone who talks to
the agent) is written here."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.http import HttpRequest
from django.template.defaultfilters import truncatechars

from agents.models import Agent, Conversation
from agentsite.admin_site import TeamScopedAdmin
from agentsite.audit import AuditedAdmin

from .models import MemoryEntry

Scope = MemoryEntry.Scope
IDENTITY_FIELDS = ("team", "scope", "agent", "user", "end_user", "conversation")


class MemoryEntryAdminForm(forms.ModelForm):
    class Meta:
        model = MemoryEntry
        fields = ["team", "scope", "agent", "user", "end_user", "conversation", "key", "content",
                  "category"]

    def clean_key(self) -> str:
        key = " ".join((self.cleaned_data.get("key") or "").split())
        entry = self.instance
        if entry.pk is not None and key != entry.key:
            # The owner fields are read-only on this form, so Django skips the unique check.
            same_owner = {"team_id": entry.team_id, "scope": entry.scope, "agent_id": entry.agent_id,
                          "user_id": entry.user_id, "end_user": entry.end_user,
                          "conversation_id": entry.conversation_id}
            if MemoryEntry.objects.filter(key=key, **same_owner).exclude(pk=entry.pk).exists():
                raise forms.ValidationError("Another entry of the same owner already has this key.")
        return key

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        team, agent = data.get("team"), data.get("agent")
        user, conversation = data.get("user"), data.get("conversation")
        scope = data.get("scope")
        if team is None or agent is None:
            return data
        if agent.team_id != team.pk:
            self.add_error("agent", "Choose an agent of the same team.")
        if user is not None and not user.memberships.filter(team=team).exists():
            self.add_error("user", "Choose a member of the same team.")
        if conversation is not None and (conversation.team_id != team.pk
                                         or conversation.agent_id != agent.pk):
            self.add_error("conversation", "Choose a conversation of this team with this agent.")
        if scope == Scope.USER and user is None:
            self.add_error("user", "User memory is about someone: choose them.")
        if scope == Scope.CONVERSATION and conversation is None:
            self.add_error("conversation", "Conversation memory needs its conversation.")
        if scope == Scope.AGENT and (user is not None or conversation is not None
                                     or data.get("end_user")):
            self.add_error("scope", "Agent memory is for everyone: leave the user, the end user "
                                    "and the conversation empty, or choose another scope.")
        return data


@admin.register(MemoryEntry)
class MemoryEntryAdmin(AuditedAdmin, TeamScopedAdmin):
    form = MemoryEntryAdminForm
    list_display = ("key", "excerpt", "scope", "agent", "user", "end_user", "category", "team",
                    "updated_at")
    list_filter = ("scope", "category")
    list_select_related = ("agent", "user", "team")
    search_fields = ("key", "content", "agent__name", "user__username", "end_user")
    raw_id_fields = ("conversation",)
    date_hierarchy = "updated_at"
    list_per_page = 50

    @admin.display(description="Content")
    def excerpt(self, obj: MemoryEntry) -> str:
        return truncatechars(obj.content, 120)

    def get_readonly_fields(self, request: HttpRequest, obj: MemoryEntry | None = None) -> tuple[str, ...]:
        # An entry's owner is what it is; change it by storing a new entry.
        if obj is not None:
            return (*IDENTITY_FIELDS, "source_trace", "created_at", "updated_at")
        return ()

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any):
        if not request.user.is_superuser:
            team_ids = self._team_ids(request, self.edit_roles)
            if db_field.related_model is Agent:
                kwargs["queryset"] = Agent.objects.filter(team_id__in=team_ids).order_by("name")
            elif db_field.related_model is get_user_model():
                kwargs["queryset"] = get_user_model().objects.filter(
                    memberships__team_id__in=team_ids).distinct().order_by("username")
            elif db_field.related_model is Conversation:
                kwargs["queryset"] = Conversation.objects.filter(team_id__in=team_ids)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)
