from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.chat, name="chat"),
    path("new/", views.conversation_new, name="conversation_new"),
    path("<uuid:conversation_uuid>/", views.conversation, name="conversation"),
    path("<uuid:conversation_uuid>/send/", views.message_send, name="message_send"),
]
