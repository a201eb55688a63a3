from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from toolhub.accounts import login as accounts_login
from toolhub.accounts import oidc
from toolhub.accounts import views as accounts
from toolhub.agents import views as agents
from toolhub.agents import views_runs as agent_runs
from toolhub.api.api import api
from toolhub.ops import views as ops
from toolhub.people import views as people
from toolhub.runs import views as runs
from toolhub.serving import openapi
from toolhub.serving import views as serving_views
from toolhub.toolkits.views import access as toolkit_access
from toolhub.toolkits.views import egress as toolkit_egress
from toolhub.toolkits.views import export as toolkit_export
from toolhub.toolkits.views import i18n as toolkit_i18n
from toolhub.toolkits.views import imports as toolkit_import
from toolhub.toolkits.views import packages
from toolhub.toolkits.views import review as reviews
from toolhub.toolkits.views import settings as toolkit_settings
from toolhub.toolkits.views import tool_tests as toolkit_tests
from toolhub.toolkits.views import toolkit as toolkits
from toolhub.usage import views as usage

urlpatterns = [
    # First: most requests are LLM apps' and scripts' tool calls, and Django tries the patterns
    # in order (some 75 before these, ~0.1 ms a call). No other pattern starts like them.
    path("api/v1/", api.urls),
    path("openapi/openapi.json", openapi.openapi_document, name="openapi_all"),
    path("openapi/<slug:slug>/openapi.json", openapi.openapi_document, name="openapi_toolkit"),
    path("openapi/<slug:slug>/<str:name>", openapi.openapi_call, name="openapi_toolkit_call"),
    path("openapi/<str:name>", openapi.openapi_call, name="openapi_all_call"),
    path("healthz", ops.healthz, name="healthz"),
    path("readyz", ops.readyz, name="readyz"),
    path("metrics", ops.metrics_view, name="metrics"),
    path("", RedirectView.as_view(pattern_name="toolkit_list", permanent=False)),
    path("accounts/login/", accounts_login.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/tokens/", accounts.api_tokens, name="api_tokens"),
    path("account/tokens/<int:token_id>/revoke/", accounts.api_token_revoke, name="api_token_revoke"),
    path("oidc/authenticate/", oidc.LoginView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", oidc.CallbackView.as_view(), name="oidc_authentication_callback"),
    path("accounts/invite/", people.invitation_password, name="invitation_password"),
    path("accounts/invite/<str:token>/", people.invitation_accept, name="invitation_accept"),
    path("people/", people.user_list, name="user_list"),
    path("people/new/", people.user_new, name="user_new"),
    path("people/user/<str:username>/", people.user_detail, name="user_detail"),
    path("people/user/<str:username>/active/", people.user_set_active, name="user_set_active"),
    path("people/user/<str:username>/invite/", people.user_reinvite, name="user_reinvite"),
    path("people/user/<str:username>/delete/", people.user_delete, name="user_delete"),
    path("groups/", people.group_list, name="group_list"),
    path("groups/<int:pk>/", people.group_detail, name="group_detail"),
    path("groups/<int:pk>/delete/", people.group_delete, name="group_delete"),
    path("clients/", accounts.client_list, name="client_list"),
    path("clients/audit/", serving_views.serving_audit, name="serving_audit"),
    path("clients/<int:client_id>/revoke/", accounts.client_revoke, name="client_revoke"),
    path("i18n/setlang/", toolkit_i18n.set_language, name="set_language"),
    path("toolkits/", toolkits.toolkit_list, name="toolkit_list"),
    path("toolkits/new/", toolkits.toolkit_new, name="toolkit_new"),
    path("toolkits/new/check/", toolkits.source_check, name="source_check"),
    path("toolkits/new/import/", toolkit_import.toolkit_import, name="toolkit_import"),
    path("toolkits/export/", toolkit_export.toolkits_export, name="toolkits_export"),
    path("toolkits/<slug:slug>/", toolkits.toolkit_detail, name="toolkit_detail"),
    path("toolkits/<slug:slug>/readiness/", toolkits.toolkit_readiness, name="toolkit_readiness"),
    path("toolkits/<slug:slug>/source/", toolkits.toolkit_source, name="toolkit_source"),
    path("toolkits/<slug:slug>/revisions/", toolkits.toolkit_revisions, name="toolkit_revisions"),
    path("toolkits/<slug:slug>/diff/", toolkits.toolkit_diff, name="toolkit_diff"),
    path("toolkits/<slug:slug>/revisions/<int:number>/download/", toolkit_export.revision_download, name="revision_download"),
    path("toolkits/<slug:slug>/export/", toolkit_export.toolkit_export, name="toolkit_export"),
    path("toolkits/<slug:slug>/clone/", toolkit_export.toolkit_clone, name="toolkit_clone"),
    path("toolkits/<slug:slug>/upload/", toolkits.toolkit_upload, name="toolkit_upload"),
    path("toolkits/<slug:slug>/edit/", toolkits.toolkit_edit, name="toolkit_edit"),
    path("toolkits/<slug:slug>/rollback/", toolkits.toolkit_rollback, name="toolkit_rollback"),
    path("toolkits/<slug:slug>/delete/", toolkits.toolkit_delete, name="toolkit_delete"),
    path("toolkits/<slug:slug>/environment/", packages.toolkit_environment, name="toolkit_environment"),
    path("toolkits/<slug:slug>/environment/live/", packages.toolkit_environment_live, name="toolkit_environment_live"),
    path("toolkits/<slug:slug>/environment/retry/", packages.toolkit_retry, name="toolkit_retry"),
    path("toolkits/<slug:slug>/access/", toolkit_access.toolkit_access, name="toolkit_access"),
    path("toolkits/<slug:slug>/egress/", toolkit_egress.toolkit_egress, name="toolkit_egress"),
    path("toolkits/<slug:slug>/valves/", toolkit_settings.toolkit_valves, name="toolkit_valves"),
    path("toolkits/<slug:slug>/settings/", toolkit_settings.toolkit_user_valves, name="toolkit_user_valves"),
    path("toolkits/<slug:slug>/tests/", toolkit_tests.toolkit_tests, name="toolkit_tests"),
    path("toolkits/<slug:slug>/tests/run/", toolkit_tests.toolkit_tests_run, name="toolkit_tests_run"),
    path("toolkits/<slug:slug>/tests/runs/<int:run_id>/", toolkit_tests.toolkit_test_run, name="toolkit_test_run"),
    path("toolkits/<slug:slug>/tests/<int:test_id>/delete/", toolkit_tests.toolkit_test_delete, name="toolkit_test_delete"),
    path("invocations/<uuid:invocation_id>/save-as-test/", runs.invocation_save_as_test, name="invocation_save_as_test"),
    path("toolkits/<slug:slug>/tools/", runs.toolkit_tools, name="toolkit_tools"),
    path("toolkits/<slug:slug>/tools/<str:tool>/run/", runs.tool_run, name="tool_run"),
    path("invocations/<uuid:invocation_id>/", runs.invocation_detail, name="invocation_detail"),
    path("invocations/<uuid:invocation_id>/live/", runs.invocation_live, name="invocation_live"),
    path("invocations/<uuid:invocation_id>/respond/", runs.invocation_respond, name="invocation_respond"),
    path("invocations/<uuid:invocation_id>/cancel/", runs.invocation_cancel, name="invocation_cancel"),
    path("history/", runs.invocation_history, name="invocation_history"),
    path("usage/", usage.usage_page, name="usage"),
    path("packages/", packages.package_queue, name="package_queue"),
    path("packages/decide/", packages.package_decide, name="package_decide"),
    path("packages/remap/", packages.package_remap, name="package_remap"),
    path("packages/<str:name>/index/", packages.package_index, name="package_index"),
    path("packages/reviews/", reviews.revision_queue, name="revision_queue"),
    path("packages/reviews/<int:revision_id>/", reviews.revision_review, name="revision_review"),
    path("agent/", agent_runs.agent_new, name="agent_new"),
    path("agent/runs/", agent_runs.agent_run_list, name="agent_run_list"),
    path("agent/runs/<uuid:run_id>/", agent_runs.agent_run_detail, name="agent_run_detail"),
    path("agent/runs/<uuid:run_id>/live/", agent_runs.agent_run_live, name="agent_run_live"),
    path("models/", agents.connection_list, name="model_connection_list"),
    path("models/new/", agents.connection_new, name="model_connection_new"),
    path("models/<int:pk>/", agents.connection_edit, name="model_connection_edit"),
    path("models/<int:pk>/test/", agents.connection_test, name="model_connection_test"),
    path("models/<int:pk>/delete/", agents.connection_delete, name="model_connection_delete"),
    path("toolkits/<slug:slug>/connect/", serving_views.toolkit_connect, name="toolkit_connect"),
    path("connect/", serving_views.connect_page, name="connect"),
    path("guides/<slug:name>/", serving_views.guide, name="guide"),
    path("admin/", admin.site.urls),
    path("toolkits/<slug:slug>/translations/", toolkit_i18n.toolkit_translations, name="toolkit_translations"),
    path("toolkits/<slug:slug>/translations/export/", toolkit_i18n.toolkit_translations_export, name="toolkit_translations_export"),
    path("toolkits/<slug:slug>/translations/import/", toolkit_i18n.toolkit_translations_import, name="toolkit_translations_import"),
]
