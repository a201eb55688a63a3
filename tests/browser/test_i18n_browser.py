"""Switching the dashboard to Polish in the browser: the navigation, the toolkit's page and
bad_calculator's display name (a `$t:` key resolved from the shipped catalogue) all read
in Polish, and the choice stays for the next page."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.conftest import example
from tests.test_i18n import make_ready

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_switching_to_polish_translates_the_dashboard_and_the_display_name(page, login, alice, upload, shot):
    toolkit = make_ready(upload(alice, example("bad_calculator"), slug="bad_calculator"))
    login(alice)
    page.goto(f"/toolkits/{toolkit.slug}/")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.get_by_role("link", name="Overview")).to_be_visible()

    # The switcher submits itself when a language is picked.
    page.get_by_label("Language").select_option("pl")
    expect(page.locator("html")).to_have_attribute("lang", "pl")
    assert page.url.endswith(f"/toolkits/{toolkit.slug}/")

    nav = page.get_by_role("navigation", name="Główna")
    expect(nav.get_by_role("link", name="Zestawy narzędzi")).to_be_visible()
    expect(nav.get_by_role("link", name="Tokeny API")).to_be_visible()
    expect(page.get_by_role("button", name="Wyloguj się")).to_be_visible()
    tabs = page.get_by_role("navigation", name="Zestaw narzędzi")
    for name in ("Przegląd", "Narzędzia", "Źródło", "Rewizje", "Tłumaczenia"):
        expect(tabs.get_by_role("link", name=name, exact=True)).to_be_visible()
    expect(page.get_by_role("heading", name="Wymagania")).to_be_visible()

    tabs.get_by_role("link", name="Tłumaczenia", exact=True).click()
    expect(page.locator("html")).to_have_attribute("lang", "pl")
    expect(page.locator(".tool-display-name")).to_contain_text("Zły kalkulator")
    expect(page.locator(".tool-display-name")).to_contain_text("celowo podaje błędną sumę")
    # The Polish column shows the catalogue's text beside the empty cell.
    expect(page.locator('tr[data-key="bad_calculator.params.a"] td[data-language="pl"]')).to_contain_text(
        "Pierwsza liczba"
    )
    shot("i18n-translations-pl")


@pytest.mark.parametrize(
    ("language", "description", "required"),
    [("fr", "Le premier nombre", "Ce champ est obligatoire."), ("zh-hans", "第一个数", "此字段为必填项。")],
)
def test_french_and_chinese_pages_translate_parameter_descriptions_and_validation_errors(
    page, login, alice, upload, shot, language, description, required
):
    toolkit = make_ready(upload(alice, example("bad_calculator"), slug="bad_calculator"))
    login(alice)
    page.goto(f"/toolkits/{toolkit.slug}/tools/?tool=bad_calculator")
    page.get_by_label("Language").select_option(language)
    expect(page.locator("html")).to_have_attribute("lang", language)
    tool = page.locator("#tool-bad_calculator")
    # The parameter's display description: a `$t:` key resolved from the shipped catalogue.
    expect(tool.locator("table")).to_contain_text(description)

    # A run with the required numbers left empty is refused, in the page's language.
    tool.locator("form.run-form button[type=submit].primary").click()
    for name in ("a", "b"):
        errors = page.locator(f"#tool-bad_calculator form.run-form [id$='_{name}_errors']")
        expect(errors).to_have_text(required)
        expect(page.locator(f"#tool-bad_calculator form.run-form [name$='_{name}']")).to_have_attribute("aria-invalid", "true")
    shot(f"i18n-validation-{language}")
