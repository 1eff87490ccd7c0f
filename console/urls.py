from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from console import (
    audit_event,
    combination,
    comparison,
    compensations,
    explorer,
    lifecycle,
    on_call,
    policies,
    readiness,
    records,
    rollouts,
    search,
    tokens,
    unknown,
    views,
)
from console.api import api
from console.prometheus import metrics_view

console_patterns = [
    path("", views.home, name="home"),
    path("tenant", views.switch_tenant, name="switch_tenant"),
    path("language", views.set_language, name="set_language"),
    path("preferences/", views.preferences_page, name="preferences"),
    path("approvals/", views.approvals, name="approvals"),
    path("approvals/<int:pk>/", views.approval_detail, name="approval"),
    path("approvals/<int:pk>/decide", views.approval_decide, name="approval_decide"),
    path("unknown/", unknown.unknown_calls, name="unknown_calls"),
    path("unknown/bulk", unknown.unknown_bulk, name="unknown_bulk"),
    path("unknown/<int:pk>/", unknown.unknown_detail, name="unknown_call"),
    path("unknown/<int:pk>/action", unknown.unknown_action, name="unknown_action"),
    path(
        "compensations/records/<int:pk>/",
        compensations.record_compensation,
        name="record_compensation",
    ),
    path(
        "compensations/records/<int:pk>/request",
        compensations.record_compensation_request,
        name="record_compensation_request",
    ),
    path(
        "compensations/records/<int:pk>/decide",
        compensations.record_compensation_decide,
        name="record_compensation_decide",
    ),
    path("compensations/runs/<int:pk>/", compensations.run_compensation, name="run_compensation"),
    path(
        "compensations/runs/<int:pk>/request",
        compensations.run_compensation_request,
        name="run_compensation_request",
    ),
    path(
        "compensations/runs/<int:pk>/decide",
        compensations.run_compensation_decide,
        name="run_compensation_decide",
    ),
    path("combinations/", views.combinations_page, name="combinations"),
    path("combinations/<int:pk>/", combination.combination_detail, name="combination"),
    path("combinations/<int:pk>/rollback", views.rollback_page, name="rollback"),
    *(
        path(
            f"combinations/<int:pk>/{change}",
            lifecycle.combination_change,
            {"change": change},
            name=f"combination_{change}",
        )
        for change in lifecycle.CHANGES
    ),
    path("rollouts/", rollouts.rollout_plans, name="rollouts"),
    path("rollouts/new", rollouts.rollout_create, name="rollout_create"),
    path("rollouts/<int:pk>/", rollouts.rollout_detail, name="rollout"),
    path("rollouts/<int:pk>/action", rollouts.rollout_action, name="rollout_action"),
    path("shadow/", comparison.shadow_pairs, name="shadow_pairs"),
    path("shadow/<int:pk>/", comparison.shadow_pair, name="shadow_pair"),
    path("ledger/", explorer.calls, name="calls"),
    path("ledger/calls/<int:pk>/", explorer.call_detail, name="call"),
    path("ledger/calls/<uuid:call_id>/", explorer.call_by_id, name="call_by_id"),
    path("ledger/find", search.find, name="find"),
    path("ledger/records/<int:pk>/", records.record_detail, name="record"),
    path("ledger/runs/", explorer.runs, name="runs"),
    path("ledger/runs/<int:pk>/", explorer.run_timeline, name="run"),
    path("audit/", views.audit_log, name="audit"),
    path("audit/<int:pk>/", audit_event.audit_event, name="audit_event"),
    path("metrics/", views.metrics_page, name="metrics"),
    path("on-call/", on_call.on_call, name="on_call"),
    path("policies/", policies.policies, name="policies"),
    path("tools/", views.tools_page, name="tools"),
    path("tools/import", views.tools_import, name="tools_import"),
    path("tools/<int:pk>/override", views.tool_override, name="tool_override"),
    path("tools/<int:pk>/key-fields", views.tool_key_fields, name="tool_key_fields"),
    path("tools/compensation", views.tool_compensation, name="tool_compensation"),
    path("tokens/", tokens.api_tokens, name="tokens"),
    path("tokens/revoke", tokens.revoke_token, name="revoke_token"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("healthz", readiness.healthz, name="healthz"),
    path("readyz", readiness.readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("login/", auth_views.LoginView.as_view(template_name="console/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("", include((console_patterns, "console"))),
]

handler403 = "console.errors.permission_denied"
handler404 = "console.errors.not_found"
handler500 = "console.errors.server_error"
