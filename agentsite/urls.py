from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from . import docs_site, health, key_views, views

handler500 = "agentsite.views.server_error"

urlpatterns = [
    path("", include("agents.chat.home")),
    path("healthz", health.healthz, name="healthz"),
    path("favicon.ico", views.favicon),
    # the documentation site, when `make docs` has built it (agentsite.docs_site)
    path("docs/", docs_site.docs, name="docs"),
    path("docs/<path:path>", docs_site.docs, name="docs_page"),
    # accounts
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("accounts/signup/", views.signup, name="signup"),
    # password reset by e-mail (404 unless EMAIL_URL is set)
    path("accounts/password/reset/", views.email_configured(auth_views.PasswordResetView.as_view()),
         name="password_reset"),
    path("accounts/password/reset/sent/", views.email_configured(auth_views.PasswordResetDoneView.as_view()),
         name="password_reset_done"),
    path("accounts/reset/<uidb64>/<token>/", views.email_configured(auth_views.PasswordResetConfirmView.as_view()),
         name="password_reset_confirm"),
    path("accounts/reset/done/", views.email_configured(auth_views.PasswordResetCompleteView.as_view()),
         name="password_reset_complete"),
    path("invite/<str:token>/", views.invitation_accept, name="invitation_accept"),
    # teams
    path("teams/none/", views.no_team, name="no_team"),
    path("teams/new/", views.team_create, name="team_create"),
    path("teams/switch/", views.team_switch, name="team_switch"),
    path("team/members/", views.members, name="members"),
    path("team/invitations/", views.invitation_create, name="invitation_create"),
    path("team/invitations/<uuid:invitation_uuid>/revoke/", views.invitation_revoke, name="invitation_revoke"),
    path("team/members/<uuid:membership_uuid>/role/", views.membership_role, name="membership_role"),
    path("team/members/<uuid:membership_uuid>/remove/", views.membership_remove, name="membership_remove"),
    path("team/members/<uuid:membership_uuid>/limits/", views.membership_limits, name="membership_limits"),
    path("team/api-keys/", key_views.keys_page, name="api_keys"),
    path("team/api-keys/new/", key_views.key_create, name="api_key_create"),
    path("team/api-keys/<uuid:key_uuid>/revoke/", key_views.key_revoke, name="api_key_revoke"),
    path("chat/", include("agents.chat.urls")),
    path("traces/", include("traces.urls")),
    path("traces/", include("agents.turns.urls")),
    path("costs/", include("traces.costs.urls")),
    path("admin/routing/", include("agents.config.urls")),
    path("admin/tools/", include("agents.tools.urls")),
    path("memory/", include("memory.urls")),
    path("admin/", admin.site.urls),
    # /v1/… (OpenAI-compatible) and /api/v1/… (REST, its schema and docs)
    path("", include("agents.api.urls")),
]
