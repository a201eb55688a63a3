"""The admins' Users and Groups pages, and the page where an invited person chooses their
password. The rules are toolhub.accounts.people's; what a person may use is
toolhub.toolkits.access's (this package may import both apps, which accounts may not)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import Group
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from toolhub.accounts import people as services
from toolhub.accounts import people_selectors as selectors
from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.models import AUTHORS_GROUP, Source
from toolhub.accounts.roles import admin_required
from toolhub.toolkits.access import toolkits_usable_by

PAGE = 25
USABLE_SHOWN = 200
INVITE_SESSION_KEY = "toolhub_invitation"


def _role_names() -> list[tuple[str, str]]:
    return [("user", _("User")), ("author", _("Author")), ("admin", _("Admin"))]


def _plain_groups():
    return Group.objects.exclude(name=AUTHORS_GROUP).order_by("name").only("name")


def _error(exc: services.PeopleError) -> str:
    return str(exc)


def _person_or_404(username: str):
    user = selectors.person_get(username)
    if user is None:
        raise Http404
    return user


# USERS
# ------------------------------------------------------------------------------


@login_required
@admin_required
@require_GET
def user_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    get = request.GET
    active = {"yes": True, "no": False}.get(get.get("active", ""))
    role = get.get("role", "") if get.get("role", "") in services.ROLES else ""
    source = get.get("source", "") if get.get("source", "") in Source.values else ""
    group = get.get("group", "")[: services.MAX_GROUP_NAME]
    qs = selectors.people(q=get.get("q", ""), role=role, group=group, active=active, source=source)
    page = Paginator(qs, PAGE).get_page(get.get("page"))
    return render(request, "people/users.html", {
        "page": page, "people": page.object_list, "roles": _role_names(), "groups": list(_plain_groups()),
        "filters": {"q": get.get("q", "")[: selectors.MAX_QUERY], "role": role, "group": group,
                    "active": get.get("active", ""), "source": source},
    })


@never_cache  # The response to the POST may hold an invitation link, shown once.
@login_required
@admin_required
@require_http_methods(["GET", "POST"])
def user_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    error = None
    form: dict[str, Any] = {"username": "", "email": "", "role": "user", "groups": [], "way": "invite"}
    if request.method == "POST":
        post = request.POST
        form = {
            "username": post.get("username", "")[:150], "email": post.get("email", "")[: services.MAX_EMAIL],
            "role": post.get("role", "user"), "groups": post.getlist("groups")[: services.MAX_GROUPS],
            "way": "password" if post.get("way") == "password" else "invite",
        }
        try:
            user, raw = services.person_create(
                username=form["username"], email=form["email"], role=form["role"], groups=form["groups"],
                password=post.get("password", "") if form["way"] == "password" else None,
                invite=form["way"] == "invite", by=request.user,
            )
        except services.PeopleError as exc:
            error = _error(exc)
        else:
            if raw is None:
                messages.success(request, _("%(name)s can now sign in.") % {"name": user.username})
                return redirect("user_detail", username=user.username)
            # The link is rendered once, in this response; only its digest is kept.
            return render(request, "people/invited.html", {
                "person": user, "link": request.build_absolute_uri(reverse("invitation_accept", args=[raw])),
            })
    return render(request, "people/user_new.html", {
        "form": form, "error": error, "roles": _role_names(), "groups": list(_plain_groups()),
        "days": settings.TOOLHUB_INVITATION_DAYS,
    }, status=400 if error else 200)


@login_required
@admin_required
@require_http_methods(["GET", "POST"])
def user_detail(request: AuthenticatedHttpRequest, username: str) -> HttpResponse:
    person = _person_or_404(username)
    error = None
    if request.method == "POST":
        post = request.POST
        try:
            services.person_update(
                user=person, by=request.user, email=post.get("email", "")[: services.MAX_EMAIL],
                role=post.get("role", ""), groups=post.getlist("groups")[: services.MAX_GROUPS],
            )
        except services.PeopleError as exc:
            error = _error(exc)
        else:
            messages.success(request, _("Changes to %(name)s saved.") % {"name": person.username})
            return redirect("user_detail", username=person.username)
        person = _person_or_404(username)
    usable = list(toolkits_usable_by(person).only("slug", "title", "use").order_by("slug")[:USABLE_SHOWN])
    return render(request, "people/user_detail.html", {
        "person": person, "error": error, "roles": _role_names(), "groups": list(_plain_groups()),
        "member_of": {g.name for g in person.listed_groups}, "usable": usable,
        "runs": selectors.recent_runs(person), "is_self": person.pk == request.user.pk,
    }, status=400 if error else 200)


@login_required
@admin_required
@require_POST
def user_set_active(request: AuthenticatedHttpRequest, username: str) -> HttpResponse:
    person = _person_or_404(username)
    active = request.POST.get("active") == "yes"
    try:
        services.person_update(user=person, by=request.user, active=active)
    except services.PeopleError as exc:
        messages.error(request, _error(exc))
    else:
        if active:
            messages.success(request, _("%(name)s is active again.") % {"name": person.username})
        else:
            messages.success(request, _("%(name)s is deactivated: they cannot sign in and their API tokens stop working.") % {"name": person.username})
    return redirect("user_detail", username=person.username)


@never_cache  # The response holds an invitation link, shown once.
@login_required
@admin_required
@require_POST
def user_reinvite(request: AuthenticatedHttpRequest, username: str) -> HttpResponse:
    person = _person_or_404(username)
    try:
        raw = services.person_reinvite(user=person, by=request.user)
    except services.PeopleError as exc:
        messages.error(request, _error(exc))
        return redirect("user_detail", username=person.username)
    return render(request, "people/invited.html", {
        "person": person, "link": request.build_absolute_uri(reverse("invitation_accept", args=[raw])),
    })


@login_required
@admin_required
@require_POST
def user_delete(request: AuthenticatedHttpRequest, username: str) -> HttpResponse:
    person = _person_or_404(username)
    try:
        services.person_delete(user=person, by=request.user)
    except services.PeopleError as exc:
        messages.error(request, _error(exc))
        return redirect("user_detail", username=person.username)
    messages.success(request, _("%(name)s deleted.") % {"name": person.username})
    return redirect("user_list")


# GROUPS
# ------------------------------------------------------------------------------


@login_required
@admin_required
@require_http_methods(["GET", "POST"])
def group_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    error = None
    name = ""
    if request.method == "POST":
        name = request.POST.get("name", "")[: services.MAX_GROUP_NAME]
        try:
            group = services.group_create(name=name)
        except services.PeopleError as exc:
            error = _error(exc)
        else:
            messages.success(request, _("Group %(name)s created.") % {"name": group.name})
            return redirect("group_detail", pk=group.pk)
    page = Paginator(selectors.groups(q=request.GET.get("q", "")), PAGE).get_page(request.GET.get("page"))
    return render(request, "people/groups.html", {
        "page": page, "groups": page.object_list, "error": error, "name": name, "authors_group": AUTHORS_GROUP,
        "q": request.GET.get("q", "")[: selectors.MAX_QUERY],
    }, status=400 if error else 200)


def _group_or_404(pk: int) -> Group:
    return get_object_or_404(selectors.groups(), pk=pk)


@login_required
@admin_required
@require_http_methods(["GET", "POST"])
def group_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    group = _group_or_404(pk)
    error = None
    if request.method == "POST":
        post = request.POST
        try:
            if post.get("action") == "rename":
                services.group_rename(group=group, name=post.get("name", "")[: services.MAX_GROUP_NAME])
                messages.success(request, _("Group renamed to %(name)s.") % {"name": group.name})
            elif post.get("action") == "add":
                names = post.get("usernames", "").replace(",", "\n").split()
                services.group_members_change(group=group, add=names)
                messages.success(request, _("Members added."))
            elif post.get("action") == "remove":
                services.group_members_change(group=group, remove=[post.get("username", "")])
                messages.success(request, _("Member removed."))
            else:
                raise services.PeopleError(_("Unknown action."))
        except services.PeopleError as exc:
            error = _error(exc)
        else:
            return redirect("group_detail", pk=group.pk)
        group = _group_or_404(pk)
    return render(request, "people/group_detail.html", {
        "group": group, "error": error, "members": selectors.group_members(group),
        "toolkits": selectors.group_toolkits(group), "is_authors": group.name == AUTHORS_GROUP,
    }, status=400 if error else 200)


@login_required
@admin_required
@require_http_methods(["GET", "POST"])
def group_delete(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """A confirmation page that says what deleting would change, then the deletion."""
    group = _group_or_404(pk)
    if request.method == "POST":
        try:
            services.group_delete(group=group)
        except services.PeopleError as exc:
            messages.error(request, _error(exc))
            return redirect("group_detail", pk=group.pk)
        messages.success(request, _("Group %(name)s deleted.") % {"name": group.name})
        return redirect("group_list")
    return render(request, "people/group_delete.html", {
        "group": group, "members": selectors.group_members(group), "toolkits": selectors.group_toolkits(group),
        "is_authors": group.name == AUTHORS_GROUP,
    })


# INVITATIONS
# ------------------------------------------------------------------------------


@never_cache
@require_GET
def invitation_accept(request: HttpRequest, token: str) -> HttpResponse:
    """The link an admin passed on. The token moves into the session and the browser goes on to
    a URL without it, so it is not sent onwards in a Referer header."""
    request.session[INVITE_SESSION_KEY] = token[:200]
    return redirect("invitation_password")


@never_cache
@require_http_methods(["GET", "POST"])
def invitation_password(request: HttpRequest) -> HttpResponse:
    raw = request.session.get(INVITE_SESSION_KEY, "")
    invitation = services.invitation_for(raw)
    if invitation is None:
        return render(request, "people/invitation.html", {"invalid": True}, status=404)
    error = None
    if request.method == "POST":
        password = request.POST.get("password", "")
        if password != request.POST.get("password2", ""):
            error = _("The two passwords differ.")
        else:
            try:
                services.invitation_accept(raw=raw, password=password)
            except services.PeopleError as exc:
                error = _error(exc)
            else:
                request.session.pop(INVITE_SESSION_KEY, None)
                messages.success(request, _("Your password is set. Sign in with it."))
                return redirect("login")
    return render(request, "people/invitation.html", {
        "invalid": False, "person": invitation.user, "error": error,
    }, status=400 if error else 200)
