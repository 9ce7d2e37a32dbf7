"""Kerberos principal names and sasl.kerberos.principal.to.local.rules, as Kafka's KerberosName,
KerberosShortNamer and KerberosRule read them."""

from __future__ import annotations

import pytest

from kafkacompat.security.kerberos import KerberosName, KerberosShortNamer, NoMatchingRule

REALM = "EXAMPLE.COM"


def short(rules: list[str] | None, name: str) -> str:
    return KerberosShortNamer(rules, REALM).short_name(KerberosName.parse(name))


def test_names_split_into_service_host_and_realm():
    assert KerberosName.parse("kafka/broker1.example.com@EXAMPLE.COM") == KerberosName(
        "kafka", "broker1.example.com", "EXAMPLE.COM")
    assert KerberosName.parse("alice@EXAMPLE.COM") == KerberosName("alice", None, "EXAMPLE.COM")
    assert KerberosName.parse("alice") == KerberosName("alice", None, None)
    assert str(KerberosName.parse("kafka/h@R")) == "kafka/h@R"
    with pytest.raises(ValueError):
        KerberosName.parse("a/b/c@R")


def test_default_keeps_the_first_component_in_the_default_realm_only():
    assert short(None, "alice@EXAMPLE.COM") == "alice"
    assert short(["DEFAULT"], "kafka/broker1@EXAMPLE.COM") == "kafka"
    assert short(None, "alice") == "alice"   # already simple
    with pytest.raises(NoMatchingRule, match="No rules apply to alice@OTHER.ORG"):
        short(None, "alice@OTHER.ORG")


def test_rules_format_match_substitute_and_change_case():
    rules = [r"RULE:[1:$1@$0](.*@OTHER\.ORG)s/@.*//L",
             r"RULE:[2:$1](kafka)s/^.*$/broker/",
             r"RULE:[2:$1_$2](svc_.*)s/\./-/g/U",
             "DEFAULT"]
    assert short(rules, "Alice@OTHER.ORG") == "alice"
    assert short(rules, "kafka/host1@EXAMPLE.COM") == "broker"
    assert short(rules, "svc/a.b.c@EXAMPLE.COM") == "SVC_A-B-C"   # g: every dot
    assert short(rules, "bob@EXAMPLE.COM") == "bob"   # only DEFAULT applies


def test_a_rule_that_leaves_a_non_simple_name_fails():
    with pytest.raises(NoMatchingRule, match="Non-simple name"):
        short([r"RULE:[1:$1@$0]"], "alice@EXAMPLE.COM")


def test_substitution_without_g_replaces_the_first_match_and_java_groups_work():
    assert short([r"RULE:[1:$1](.*)s/a/x/"], "banana@EXAMPLE.COM") == "bxnana"
    assert short([r"RULE:[1:$1](.*)s/(b)(a)/$2$1/"], "banana@EXAMPLE.COM") == "abnana"


@pytest.mark.parametrize("rule", ["RULE:[1:$1]oops", "NOPE", "RULE:[1:$1](x"])
def test_invalid_rules_are_refused(rule):
    with pytest.raises(ValueError, match="Invalid rule"):
        KerberosShortNamer([rule], REALM)


def test_gss_failures_get_a_hint_for_what_to_fix():
    from kafkacompat.security.gssapi_sasl import _explain

    assert "clocks differ" in _explain("Clock skew too great")
    assert "sasl.kerberos.service.name" in _explain("The ticket isn't for us")
    assert "sasl.kerberos.service.name" in _explain("Wrong principal in request")
    assert _explain("Invalid token was supplied") == "Invalid token was supplied"
