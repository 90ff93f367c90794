from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.chat, name="chat"),
    path("new/", views.conversation_new, name="conversation_new"),
    path("<uuid:conversation_uuid>/", views.conversation, name="conversation"),
    path("<uuid:conversation_uuid>/send/", views.message_send, name="message_send"),
    path("<uuid:conversation_uuid>/rename/", views.conversation_rename, name="conversation_rename"),
    path("<uuid:conversation_uuid>/archive/", views.conversation_archive, name="conversation_archive"),
    path("<uuid:conversation_uuid>/delete/", views.conversation_delete, name="conversation_delete"),
    path("<uuid:conversation_uuid>/share/", views.conversation_share, name="conversation_share"),
    path("<uuid:conversation_uuid>/pin/", views.conversation_pin, name="conversation_pin"),
    path("<uuid:conversation_uuid>/attachments/", views.attachment_upload, name="attachment_upload"),
    path("<uuid:conversation_uuid>/attachments/<uuid:attachment_uuid>/", views.attachment, name="attachment"),
    path("<uuid:conversation_uuid>/model/", views.conversation_model, name="conversation_model"),
    path("<uuid:conversation_uuid>/turns/<uuid:trace_uuid>/regenerate/", views.turn_regenerate,
         name="turn_regenerate"),
    path("<uuid:conversation_uuid>/messages/<uuid:message_uuid>/edit/", views.message_edit,
         name="message_edit"),
]
