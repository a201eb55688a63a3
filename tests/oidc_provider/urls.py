from __future__ import annotations

from django.contrib.auth import authenticate, login
from django.http import HttpResponse, HttpResponseRedirect
from django.urls import include, path
from django.utils.html import escape
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt  # A test provider's own sign-in page: a form the test posts to.
def sign_in(request):
    next_url = request.GET.get("next") or request.POST.get("next") or "/"
    if request.method == "POST":
        user = authenticate(request, username=request.POST.get("username"), password=request.POST.get("password"))
        if user is not None:
            login(request, user)
            return HttpResponseRedirect(next_url)
    return HttpResponse(
        f'<form method="post"><input name="username"><input name="password" type="password">'
        f'<input name="next" value="{escape(next_url)}"><button>Sign in</button></form>'
    )


urlpatterns = [
    path("login/", sign_in),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
]
