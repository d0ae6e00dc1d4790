"""The SQL filter case table: messages and (expected, message, expression) rows.

Expected: T (true), F (false), U (unknown), E (the expression is refused: FilterError).
Rows marked in the comments as from RabbitMQ come from ``deps/rabbit/test/
amqp_filter_sql_unit_SUITE.erl`` (rabbitmq-server, 4.2): RabbitMQ only tells match (T) from no
match (F or U), so each such row states the exact three-valued result our evaluator must give.
Message names refer to ``MESSAGES``; ``-`` is the empty message.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from proton import UNDESCRIBED, Array, Data, Described, char, symbol, timestamp, ulong

__all__ = ["MESSAGES", "CASES", "EXTRA_CASES", "NOT_ENCODABLE", "rows"]

#: messages that cannot be encoded as AMQP (only tested as decoded views)
NOT_ENCODABLE = frozenset(("bigint",))

# ---- messages: section name -> dict, as MessageView.from_sections takes them ----
MESSAGES: dict[str, dict[str, dict]] = {
    "-": {},
    # RabbitMQ's app_props(): symbols, strings, numbers of several widths, booleans, a null
    "rmq": {"application_properties": {
        "country": symbol("UK"), "city": "London", "description": "This is a test message",
        "currency": symbol("GBP"), "product_id": symbol("ABC_123"),
        "weight": 5, "price": 10.5, "quantity": 100, "discount": 0.25, "temperature": -5,
        "score": 0, "distance": 1.2e6, "tiny_value": 3.5e-4, "large_value": 6.02e23,
        "active": True, "premium": False, "missing": None, "percentage": 75}},
    "empty": {"application_properties": {"empty": ""}},
    "utf8": {"application_properties": {"food": "car🥕rot", "country": "🇬🇧"}},
    "key_foo": {"application_properties": {"key": "_foo"}},
    "key_plain": {"application_properties": {"key": "foo"}},
    "bin": {"application_properties": {
        "data": b"Hello", "signature": bytes.fromhex("DEADBEEF"), "empty": b"", "single": b"\xff",
        "zeros": b"\x00\x00\x00", "bad_utf8": b"\x00\x01\x80"}},
    "props": {"properties": {
        "message_id": "id-123", "user_id": bytes([10, 11, 12]), "to": "to some queue",
        "subject": "some subject", "reply_to": "reply to some topic", "correlation_id": ulong(789),
        "content_type": symbol("text/plain"), "content_encoding": symbol("deflate"),
        "absolute_expiry_time": timestamp(1311999988888), "creation_time": timestamp(1311704463521),
        "group_id": "some group ID", "group_sequence": 999, "reply_to_group_id": "other group ID"}},
    "hdr7": {"header": {"priority": 7, "durable": True, "ttl": 60000, "first_acquirer": True,
                        "delivery_count": 2},
             "properties": {"message_id": "id-123", "group_sequence": 10},
             "application_properties": {"key_1": -1}},
    "price11": {"header": {"priority": 11}, "application_properties": {"price": 10.5}},
    "idents": {"application_properties": {
        k: True for k in ["simple", "x", "with_underscore_123", "🥕", "ニンジン",
                          "with    four    spaces", " ", "", "NOT", "not", "AND", "OR", "IN",
                          "NULL", "-", "+", "FALSE", "!@#$%^&*()_+~`|{}?<>", "[ key ]",
                          "[[key]]", "]", "][", "[]", "properties.to", "p.to", "between",
                          "BETWEEN", "Weight", "COUNTRY"]},
        "properties": {"to": "q1"}},
    "case": {"application_properties": {"country": "UK", "COUNTRY": "France", "weight": 5,
                                        "Weight": 10}},
    "types": {"application_properties": {
        "sym": symbol("abc"), "str": "abc", "bin": b"abc", "uid": uuid.UUID(int=0x0102),
        "ch": char("A"), "ts": timestamp(1000), "ul": ulong(2**64 - 1), "dec": Decimal("1.5"),
        "lst": [1, "two", [3]], "map": {"k": "v", symbol("s"): 5, "n": {"deep": True}},
        "f": 1.5, "i": 3, "neg": -7, "t": True, "fa": False, "nul": None,
        "nl": "ab\n", "nl2": "a\nb", "nan": float("nan"), "inf": float("inf")}},
    # values RabbitMQ's simple map drops, beside simple ones (the property filters drop them too:
    # test_property_filter.py's rows)
    "dropped": {"application_properties": {
        "arr": Array(UNDESCRIBED, Data.INT, 1, 2), "desc": Described(symbol("x"), 1),
        "dec": Decimal("2.5"), "ninf": float("-inf"), "n": 1}},
    # not encodable in AMQP (wider than 64 bits): only evaluated on decoded views
    "bigint": {"application_properties": {"big": 2**70}},
    "uuidmsg": {"properties": {"message_id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
                               "correlation_id": b"correlation", "user_id": b"\xff"}},
    "annot": {"message_annotations": {symbol("x-opt-region"): "EMEA", symbol("rank"): 3},
              "footer": {symbol("checksum"): "abc"},
              "application_properties": {"items": [{"sku": "A1", "qty": 2}, {"sku": "B2"}],
                                         "tags": {"color": "red"}}},
    "like": {"application_properties": {
        "s": "##.\\|()[]{} ^$*+???", "esc": "_#.\\|()[]{} ^$*+?%", "five": "5%",
        "carrot": "🥕%", "cake": "🍰%🥕", "cake2": "🍰other🥕", "cake3": "🍰🥕", "aa": "aa",
        "a": "a", "flag": "a🇬🇧", "flag2": "_🇬🇧", "long": "x" * 500}},
}

# ---- rows: "E message expression" per line; # starts a comment line ----
_TABLE = r'''
# --- logical operators (RabbitMQ logical_operators) ---
T rmq country = 'UK' AND weight = 5
T rmq 'UK' = country AND 5 = weight
T rmq country = 'France' OR weight < 6
T rmq NOT country = 'France'
F rmq country = 'UK' AND weight > 5
F rmq missing AND premium
U rmq active AND absent
U rmq NOT absent
U rmq premium OR absent
T rmq absent OR active
T rmq active OR absent
T rmq percentage OR active
T rmq active OR percentage
U rmq percentage AND active
F rmq percentage AND premium
U rmq NOT percentage
U rmq NOT (absent IN ('v1', 'v2') AND active)
U rmq NOT (absent IN ('v1', 'v2') AND absent LIKE 'v3')
T rmq NOT (absent IN ('v1', 'v2') AND premium)
U rmq NOT (active AND absent IN ('v1', 'v2'))
T rmq NOT (active AND premium)
U rmq NOT (absent IN ('v1', 'v2') OR premium)
U rmq NOT (absent IN ('v1', 'v2') OR absent LIKE 'v3')
F rmq NOT (absent IN ('v1', 'v2') OR active)
T rmq NOT (NOT (absent IN ('v1', 'v2') OR active))
U rmq NOT (premium OR absent IN ('v1', 'v2'))
U rmq NOT (NOT (premium OR absent IN ('v1', 'v2')))
T rmq country = 'UK' AND (weight > 3 OR price < 20)
T rmq NOT (country = 'France' OR country = 'Germany')
F rmq country = 'UK' AND NOT active = TRUE
T rmq (country = 'US' OR country = 'UK') AND (weight > 2 AND weight < 10)
# truth tables of AND / OR / NOT (Jakarta Messaging 3.1 tables 3-4..3-6)
T - TRUE AND TRUE
F - TRUE AND FALSE
U - TRUE AND x
F - FALSE AND TRUE
F - FALSE AND FALSE
F - FALSE AND x
U - x AND TRUE
F - x AND FALSE
U - x AND y
T - TRUE OR TRUE
T - TRUE OR FALSE
T - TRUE OR x
T - FALSE OR TRUE
F - FALSE OR FALSE
U - FALSE OR x
T - x OR TRUE
U - x OR FALSE
U - x OR y
F - NOT TRUE
T - NOT FALSE
U - NOT x
T - NOT NOT TRUE
T - TRUE
F - FALSE
U - 1
U - 'TRUE'
U - x
# --- comparison (RabbitMQ comparison_operators) ---
T rmq country = 'UK'
F rmq country = 'US'
T rmq country <> 'US'
T rmq country != 'US'
F rmq country <> 'UK'
F rmq country != 'UK'
T rmq weight > 3
F rmq weight > 5
T rmq country > 'DE'
F rmq country > 'US'
T rmq 'Zurich' > city
T rmq weight < 10
F rmq weight < 5
T rmq country < 'US'
F rmq country < 'DE'
T rmq weight >= 5
T rmq weight >= 4
F rmq weight >= 6
T rmq country >= 'UK'
T rmq country >= 'DE'
T rmq weight >= 5.0
T rmq weight >= 4.99
F rmq weight >= 5.01
T rmq price >= 10.5
F rmq price >= 10.51
T rmq price >= 10.4
T rmq price >= 10
F rmq price >= 11
T rmq weight <= 5
T rmq weight <= 6
F rmq weight <= 4
T rmq price <= 10.6
F rmq price <= 10
T rmq country <= 'US'
T rmq country <= 'UK'
F rmq country <= 'DE'
T rmq active = TRUE
T rmq premium = FALSE
F rmq premium <> FALSE
F rmq premium >= 'false'
F rmq premium <= 'false'
F rmq premium >= 0
F rmq premium <= 0
F rmq weight = '5'
F rmq weight >= '5'
F rmq weight <= '5'
F rmq country <= TRUE
F rmq country >= TRUE
F rmq country > 1
F rmq country >= 1
F rmq country < 1
F rmq country <= 1
# quirk: <> between different types is true (Erlang /=)
T rmq weight <> 'UK'
T rmq active <> 1
T - TRUE <> 'TRUE'
F - TRUE = 1
F - FALSE = 0
F - 1 = TRUE
# ordering between a boolean and anything is false, never unknown
F - TRUE > FALSE
F - TRUE >= TRUE
# comparisons with literals on both sides are folded
T - 1 < 2
T - 'a' < 'b'
T - 'B' < 'a'
F - 'abc' < 'ab'
T - '' < 'a'
T - 2 = 2.0
T - 0 = 0.0
T - 0.0 = -0.0
# non-associative comparisons
E - 1 = 1 = 1
E - 1 < 2 < 3
E - a = b <> c
T - (1 = 1) = TRUE
T - (1 < 2) <> FALSE
# --- arithmetic (RabbitMQ arithmetic_operators) ---
T rmq weight + 5 = 10
T rmq price + 4.5 = 15
T rmq weight - 2 = 3
T rmq price - 0.5 = 10
T rmq weight * 2 = 10
T rmq quantity * price * discount = 262.5
T rmq weight / 2 = 2.5
T rmq price / 2 = 5.25
T rmq quantity / 10 = 10
T rmq quantity / 10 = 10.000
T rmq weight % 2 = 1
T rmq quantity % weight = 0.00
T rmq score = quantity % quantity
T rmq quantity % percentage = 25
T rmq 24 < quantity % percentage
T rmq 7 % temperature = 2
U rmq quantity % score = 0
T rmq 101 % percentage % weight = 1
T rmq (quantity + 1) % percentage % weight = 1
T rmq 101 % (percentage % 30) = 11
T rmq (weight + 5) * 2 = 20
T rmq price / (weight - 3) = 5.25
T rmq +temperature = -5
T rmq -temperature = 5
T rmq +weight = 5
T rmq -weight = -5
T rmq 6 + -weight = 1
T rmq 6 - +weight = 1
T rmq 6 + +weight = 11
T rmq 6 - -weight = 11
T rmq +(-weight) = -5
T rmq -(+weight) = -5
T rmq -(-weight) = 5
T rmq +(+weight) = 5
U rmq +weight
U rmq +city
U rmq +city = 'London'
U rmq -absent
U rmq absent + 4 = 5
U rmq 2 * absent = 0
# remainder has the sign of the dividend; % on floats is unknown
T - -7 % 3 = -1
T - 7 % -3 = 1
T - -7 % -3 = -1
U - 7.0 % 2 = 1
U - 7 % 2.0 = 1
# / is float division
T - 7 / 2 = 3.5
T - 1 / 3 > 0.333
T - 6 / 3 = 2
U - 1 / 0 = 1
U - 1 / 0.0 = 1
U - 0 / 0 = 0
T - 0.0 / 1 = 0
# arbitrary-size integers, as in Erlang
T - 9223372036854775807 + 1 = 9223372036854775808
T - 99999999999999999999 * 10 = 999999999999999999990
# unary applies to a primary only
E - --5 = 5
E - - -5 = 5
E - +-5 = 5
T - -(-5) = 5
T - 2 - -2 = 4
# arithmetic on non-numbers is unknown, also booleans and strings (no concatenation)
U - 'a' + 'b' = 'ab'
T - ('a' + 'b') IS NULL
U - TRUE + 1 = 2
U rmq active + premium = 1
U rmq country + weight = 'UK5'
U - -'a' = 'a'
U - -TRUE = FALSE
# precedence (RabbitMQ precedence_and_parentheses)
T rmq weight + 2 * 3 = 11
T rmq (weight + 2) * 3 = 21
T rmq weight + weight * quantity - -temperature / 2 = 502.5
T rmq NOT country = 'US' AND weight > 3
T rmq weight > 3 AND NOT country = 'US'
T rmq NOT (country = 'US' AND weight > 3)
T rmq NOT country = 'US' OR country = 'France' AND weight > 3
T rmq country = 'France' AND weight > 3 OR NOT country = 'US'
T rmq weight * 2 > 5 + 3
T rmq weight = -(-81) % percentage -1
T rmq weight -(-2.0) = -(-81) % (percentage -1)
T rmq price < 20 OR country = 'US' AND weight > 3
T rmq weight > 3 AND price < 20 OR country = 'US'
F rmq weight > 3 AND (price > 20 OR country = 'US')
T rmq ((weight > 3) AND (price < -1)) OR ((country = 'UK') AND (city = 'London'))
T rmq weight > 3 AND price < -1 OR country = 'UK' AND city = 'London'
T rmq (weight + (price * 2)) > (score + 15)
T - 2 + 3 * 4 = 14
T - 10 - 4 - 3 = 3
T - 100 / 10 / 5 = 2
T - 2 * 3 % 4 = 2
T - TRUE OR FALSE AND FALSE
F - (TRUE OR FALSE) AND FALSE
T - NOT FALSE AND TRUE
# --- strings (RabbitMQ single_quoted_strings, double_quoted_strings) ---
F rmq country = '🇬🇧'
T utf8 country = '🇬🇧'
T - 'UK''s' = 'UK''s'
T - 'UK''s' = "UK's"
T - "UK" = "UK"
T rmq country = "UK"
F rmq country = "US"
T - 'UK' = "UK"
T - "" = ''
T - """" = '"'
T - """""" = '""'
T - "They said ""Hello""" = 'They said "Hello"'
T rmq description LIKE "%test%"
T rmq country IN ("US", 'UK', "France")
T rmq "London" IN (city, country)
T rmq country < "US"
T rmq "US" >= country
T - "🇬🇧" = '🇬🇧'
F - "🇬🇧" != '🇬🇧'
E - 'abc
E - "abc
E - 'a'' = 'a'
# --- binary constants (RabbitMQ binary_constants) ---
T - 0x48656C6C6F = 0x48656C6C6F
F - 0x48656C6C6F = 0x48656C6C6F21
T bin data = 0x48656C6C6F
F bin data = 0x48656C6C
T bin signature = 0xDEADBEEF
F bin signature = 0xDEADBEEE
T bin single = 0xFF
F bin single = 0xFE
T bin zeros = 0x000000
F bin empty = 0x00
T bin signature IN (0xCAFEBABE, 0xDEADBEEF)
F bin signature IN (0xCAFEBABE, 0xFEEDFACE)
T bin data IN (0x48656C6C6F, 0x576F726C64)
T bin data IN (data)
T bin signature NOT IN (0xCAFEBABE, 0xFEEDFACE)
F bin signature NOT IN (0xDEADBEEF, 0xCAFEBABE)
T - 0xAB <> 0xAC
T - 0xAB != 0xAC
F - 0xAB = 0xAC
T bin data = 0x48656C6C6F AND signature = 0xDEADBEEF
T bin missing_binary IS NULL
F bin data IS NULL
T bin data IS NOT NULL
F rmq weight = 0x05
F rmq active = 0x01
U bin 0x01 + 0x02 = 0x03
U bin signature + 1 = 0xDEADBEF0
T bin 0xBB > 0xAA
T bin 0x010101 > zeros
T bin 0x010101 >= zeros
F bin 0x010101 < zeros
F bin 0x010101 <= zeros
T bin 0xFE < single
T bin 0xFE <= single
T uuidmsg p.user_id = 0xFF
T uuidmsg p.correlation_id = 0x636F7272656C6174696F6E
E - data = 0x
E - data = 0x1
E - data = 0x123
E - data = 0xG1
E - data = 0x1G
E - data = 0x1a
E - data = 0xab
E - data = 0xAb
E - data = 0xdead
E - data LIKE 0x48
# quirk: a binary equals the string with the same UTF-8 bytes, and orders with strings
T bin data = 'Hello'
T bin 'Hello' = data
T - 0x616263 = 'abc'
T - 'abd' > 0x616263
T - 0xC3A9 = 'é'
T bin data LIKE 'Hel%'
T bin data LIKE 'H_llo'
T bin data IN ('Hello')
# a binary that is not UTF-8: prefix/suffix compare bytes, other patterns are unknown
F bin bad_utf8 LIKE '%a'
U bin single LIKE '_a'
F bin single LIKE 'a%'
F bin single LIKE 'a'
# --- LIKE (RabbitMQ like_operator) ---
T rmq description LIKE '%test%'
T rmq description LIKE 'This is a %'
T rmq description LIKE '%a test message'
T rmq description LIKE 'T_i% a %e_%e_sa%'
F rmq description LIKE 'T_i% a %e_%e_sa'
F rmq description LIKE 'is a test message'
T rmq country LIKE 'UK'
T rmq country LIKE 'U_'
T rmq country LIKE '_K'
T rmq country LIKE 'UK%'
T rmq country LIKE '%UK'
T rmq country LIKE 'U%K'
F rmq country LIKE 'US'
F rmq country LIKE '_UK'
F rmq country LIKE 'UK_'
F rmq country LIKE 'U_K'
F rmq city LIKE 'New%'
T like aa LIKE 'a%a'
F like a LIKE 'a%a'
T empty empty LIKE ''
T empty empty LIKE '%'
T empty empty LIKE '%%'
T empty empty LIKE '%%%'
F empty empty LIKE 'x'
F empty empty LIKE '%x'
F empty empty LIKE '%x%'
F empty empty LIKE '_'
T utf8 food LIKE 'car🥕rot'
T utf8 food LIKE 'car_rot'
T utf8 food LIKE '___🥕___'
T utf8 food LIKE '%🥕%'
T utf8 food LIKE '%_🥕_%'
T utf8 food LIKE '_%🥕%_'
F utf8 food LIKE 'car__rot'
F utf8 food LIKE 'carrot'
F utf8 food LIKE 'car🥕to'
T like s LIKE '_#.\|()[]{} ^$*+?%'
T like s LIKE '##.\|()[]{} ^$*+???'
T key_foo key LIKE 'z_%' ESCAPE 'z'
F key_plain key LIKE 'z_%' ESCAPE 'z'
T key_foo key LIKE '$_%' ESCAPE '$'
F key_plain key LIKE '$_%' ESCAPE '$'
T like five LIKE '_$%' ESCAPE '$'
T like carrot LIKE '_$%' ESCAPE '$'
T like cake LIKE '🍰@%🥕' ESCAPE '@'
F like cake2 LIKE '🍰@%🥕' ESCAPE '@'
F like cake3 LIKE '🍰@%🥕' ESCAPE '@'
T like esc LIKE '!_#.\|()[]{} ^$*+?!%' ESCAPE '!'
F like s LIKE '!_#.\|()[]{} ^$*+?!%' ESCAPE '!'
T rmq product_id LIKE 'ABC\_%' ESCAPE '\'
F rmq product_id LIKE 'ABC\%' ESCAPE '\'
F rmq product_id LIKE 'ABC\_\%' ESCAPE '\'
T rmq product_id LIKE 'ABC🥕_123' ESCAPE '🥕'
F rmq product_id LIKE 'ABC🥕%123' ESCAPE '🥕'
T rmq product_id LIKE "ABC\_%" ESCAPE "\"
T rmq country NOT LIKE 'US'
F rmq country NOT LIKE 'U_'
F rmq country NOT LIKE '%U%'
F rmq country NOT LIKE 'U%K'
T rmq country NOT LIKE 'U%S'
T like flag NOT LIKE 'z_🇬🇧' ESCAPE 'z'
F like flag2 NOT LIKE 'z_🇬🇧' ESCAPE 'z'
U rmq absent LIKE '%'
U rmq absent NOT LIKE '%'
U rmq missing LIKE '%'
U rmq missing NOT LIKE '%'
U rmq weight LIKE '5'
U rmq active LIKE 'true'
U rmq weight NOT LIKE '5'
T rmq description LIKE '%test%' AND country = 'UK'
T rmq (city LIKE 'Paris') OR (description LIKE '%test%')
T rmq city LIKE 'Paris' OR description LIKE '%test%'
# the escape character escapes itself and % and _, and may be % or _
T - 'a%' LIKE 'a%%' ESCAPE '%'
F - 'ab' LIKE 'a%%' ESCAPE '%'
T - 'a_b' LIKE 'a__b' ESCAPE '_'
T - 'a!b' LIKE 'a!!b' ESCAPE '!'
T - 'ab' LIKE 'a!b' ESCAPE '!'
E - id LIKE 'pattern*' ESCAPE '*'
E - id LIKE '_pattern*' ESCAPE '*'
E - id LIKE 'x' ESCAPE ''
E - id LIKE 'x' ESCAPE 'ab'
E - id LIKE id
E - id LIKE 5
# many wildcards, long subjects: linear time
T like long LIKE '%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%'
F like long LIKE '%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%y%'
F like long LIKE '%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_x%_xy'
T like long LIKE 'x%_%_%x'
# quirk (PCRE without dotall): wildcards never match a line feed, $ may stand before a final one
F types nl LIKE 'ab'
T types nl LIKE 'ab%'
T types nl LIKE 'a_'
T types nl LIKE 'a%b%'
F types nl2 LIKE 'a_b'
T types nl2 LIKE 'a%'
F types nl2 LIKE 'a%%'
# --- IN (RabbitMQ in_operator) ---
T rmq country IN ('US', 'UK', 'France')
T rmq country IN ('UK')
T utf8 country IN ('🇫🇷', '🇬🇧')
F rmq country IN ('US', 'France')
T rmq 'London' IN (city, country)
T price11 price IN (h.priority - 0.5)
F price11 price IN (h.priority + 0.5)
T hdr7 10.0 IN (TRUE, p.group_sequence)
T hdr7 10.00 IN (FALSE, p.group_sequence)
T rmq country NOT IN ('US', 'France', 'Germany')
T rmq country NOT IN ('🇬🇧')
F utf8 country NOT IN ('🇫🇷', '🇬🇧')
F rmq country NOT IN ('US', 'UK', 'France')
F rmq 'London' NOT IN (city, country)
F hdr7 10.0 NOT IN (TRUE, p.group_sequence)
T rmq country IN ('UK', 'US') AND weight > 3
T rmq city IN ('Berlin', 'Paris') OR country IN ('UK', 'US')
U rmq missing IN ('UK', 'US')
U rmq absent IN ('UK', 'US')
U rmq missing NOT IN ('UK', 'US')
U rmq absent NOT IN ('UK', 'US')
# quirk: a null item is just not equal (Erlang ==), so IN is false and NOT IN true
F rmq 'x' IN (absent)
T rmq 'x' NOT IN (absent, missing)
T rmq weight IN (absent, 5)
T rmq weight IN (5.0)
T rmq weight IN (1, 2, 3, 4, 5)
F rmq weight IN ('5')
F rmq active IN (1)
T rmq active IN (TRUE)
T rmq premium IN (FALSE, 0)
F rmq premium IN (0)
T - 1 IN (1)
T - 'a' IN ('b', 'a')
T - 2 IN (1 + 1)
E - x IN ()
E - x IN 'a'
E - x IN ('a',)
# --- IS NULL (RabbitMQ null_handling) ---
T rmq missing IS NULL
T rmq absent IS NULL
F rmq country IS NULL
T rmq country IS NOT NULL
F rmq missing IS NOT NULL
F rmq absent IS NOT NULL
T rmq country = 'UK' AND missing IS NULL
T rmq country = 'France' OR weight IS NOT NULL
U rmq missing > 0
U rmq 0 < missing
U rmq 0 > absent
U rmq 0 = missing
U rmq missing >= 0
U rmq missing < 0
U rmq missing <= 0
U rmq missing = 0
U rmq missing <> 0
U rmq 0 != missing
U rmq missing = missing
U rmq absent = absent
U rmq missing AND TRUE
U rmq missing OR FALSE
F - 1 IS NULL
T - (a) IS NULL
T rmq (weight + 1) IS NOT NULL
T rmq weight / 0 IS NULL
T - LOWER(1) IS NULL
E - x = NULL
E - x IS NULL NULL
E - NULL
# --- literals (RabbitMQ literals, scientific_notation) ---
T rmq 5 = 5
T rmq weight = 5
T rmq 10.5 = 10.5
T rmq price = 10.5
T rmq 5.0 > 4.999
T rmq 0 = 0.0
T rmq weight = 5.0
T rmq 5.0 = weight
T rmq 'UK' = 'UK'
T rmq TRUE = TRUE
T rmq active = TRUE
T rmq active
T rmq FALSE = FALSE
T rmq premium = FALSE
F rmq FALSE
F rmq premium
T rmq weight + 2 > 6
T rmq price * 2 > 20.0
T rmq 'UK' <> 'US'
E - 5. > 0
E - .5 > 0
E - .5E2 > 0
E - 5E2 > 0
E - 5e2 > 0
E - 1.5e2 > 0
E - 1.5E > 0
E - 1.E2 > 0
E - 1.0E400 > 0
T rmq distance = 1.2E6
T rmq distance = 1200000.0
T rmq tiny_value = 3.5E-4
T rmq tiny_value = 0.00035
T rmq 1.2E3 = 1200
T rmq 5.0E2 = 500
T rmq 5.0E+2 = 500
T rmq 5.0E-2 = 0.05
T rmq -5.0E-2 = -0.05
T rmq 1.0E0 = 1
T rmq distance / 1.2E5 = 10
T rmq tiny_value * 1.0E+6 = 350
T rmq 1.5E2 + 2.5E2 = 400
T rmq 3.0E3 - 2.0E3 = 1000
T rmq distance > 1.0E6
T rmq tiny_value < 1.0E-3
T rmq distance / 1200 = 1000
T rmq large_value + tiny_value >= large_value
T rmq large_value + large_value > large_value
# decimal literals are floats, as in RabbitMQ: binary floating point
F - 0.1 + 0.2 = 0.3
T - 0.5 + 0.25 = 0.75
T - 007 = 7
# --- case sensitivity and reserved words (RabbitMQ case_sensitivity, identifiers) ---
T case country = 'UK'
T case COUNTRY = 'France'
T case Weight = 10
F case COUNTRY = 'UK'
F case country = 'France'
F case weight = 10
U case WEIGHT = 5
T case country = 'UK' AND COUNTRY = 'France' AND weight < 6 AND Weight = 10
E - country = 'UK' and weight = 5
E - country = 'UK' AnD weight = 5
E - not country = 'France'
E - country like 'U%'
E - country in ('UK')
E - missing is null
E - x = true
E - x = False
E - not
E - Not
E - and
E - or
E - true
E - True
E - false
E - upper
E - lower
E - left
E - right
E - substring
E - utc
E - date
E - exists
E - null
E - is
E - Is
E - in
E - like
E - escape
E - nan
E - inf
E - Inf
E - NaN
E - my.key
E - my$key
E - $mykey
E - _mykey
E - 1mykey
E - AND NOT
E - !!!
E - 
E - ()
E - (TRUE
E - TRUE)
# --- identifiers (RabbitMQ identifiers) ---
T idents simple
T idents x
T idents with_underscore_123
T idents application_properties.with_underscore_123
T idents a.with_underscore_123
T idents [with_underscore_123]
T idents [🥕]
T idents [ニンジン]
T idents [with    four    spaces]
T idents [ ]
T idents []
T idents [NOT]
T idents [not]
T idents [AND]
T idents [OR]
T idents [IN]
T idents [NULL]
T idents [-]
T idents [+]
T idents [FALSE]
T idents [!@#$%^&*()_+~`|{}?<>]
T idents [[[ key ]]]
T idents [[[[[key]]]]]
T idents []]]
T idents []][[]
T idents [[[]]]
T idents properties.to = 'q1'
T idents p.to = 'q1'
T idents [properties.to] = TRUE
T idents [p.to] = TRUE
T idents a.[p.to]
T idents a.[with    four    spaces]
E - [a]b]
E - [a[b]
E - [abc
# between is not reserved (RabbitMQ 4.2 accepts it as an identifier): it stays one
T idents between
T idents BETWEEN
T idents BETWEEN = TRUE
T idents NOT BETWEEN = FALSE
# --- whitespace (RabbitMQ whitespace_handling) ---
T rmq country    =    'UK'
T rmq country='UK'AND weight=5
T rmq description = 'This is a test message'
# --- header (RabbitMQ header_section) ---
T hdr7 h.priority > 5
T hdr7 h.priority = 7
F hdr7 h.priority < 7
T hdr7 header.priority = 7
T - h.priority = 4
T - header.priority = 4
F - h.priority IS NULL
T hdr7 -1.0 = key_1 AND 4 < header.priority AND properties.group_sequence > 9
F hdr7 -1.0 = key_1 AND 4 < header.priority AND properties.group_sequence < 9
T hdr7 properties.message_id = 'id-123'
T hdr7 p.message_id = 'id-123'
T hdr7 application_properties.key_1 = -1
T hdr7 a.key_1 = -1
T hdr7 key_1 = -1
E - header.invalid
E - h.invalid
E - h.Priority
E - properties.invalid
E - p.message-id
E - properties.group-id = 'x'
E - delivery_annotations.abc
E - delivery-annotations.abc
E - d.abc
E - d.[abc]
E - message-annotations.abc
E - application-properties.foo = 'bar'
E - x.abc
E - q.[abc]
E - h1.priority
# extension: header fields besides priority, with AMQP defaults
T hdr7 h.durable
T hdr7 h.ttl = 60000
T hdr7 h.first_acquirer = TRUE
T hdr7 h.delivery_count = 2
F - h.durable
T - h.durable = FALSE
T - h.first_acquirer = FALSE
T - h.delivery_count = 0
T - h.ttl IS NULL
U - h.ttl > 0
T hdr7 EXISTS(h.priority)
F - EXISTS(h.priority)
# --- properties (RabbitMQ properties_section) ---
T props p.message_id = 'id-123'
F props 'id-123' != p.message_id
T props p.message_id LIKE 'id-%'
T props p.message_id IN ('id-123', 'id-456')
T props p.user_id = 0x0A0B0C
F props p.user_id = 0xFF
T props p.to = 'to some queue'
T props p.to LIKE 'to some%'
T props p.to NOT LIKE '%topic'
T props p.subject = 'some subject'
T props p.subject LIKE '%subject'
T props p.subject IN ('some subject', 'other subject')
T props p.reply_to = 'reply to some topic'
T props p.reply_to LIKE 'reply%topic'
F props p.reply_to LIKE 'reply%queue'
T props p.correlation_id = 789
T props 500 < p.correlation_id
F props p.correlation_id < 700
T props p.content_type = 'text/plain'
T props p.content_type LIKE 'text/%'
T props p.content_type IN ('text/plain', 'text/html')
T props 'deflate' = p.content_encoding
F props p.content_encoding = 'gzip'
T props p.content_encoding NOT IN ('gzip', 'compress')
T props p.absolute_expiry_time = 1311999988888
T props p.absolute_expiry_time > 1311999988000
T props p.creation_time = 1311704463521
T props p.creation_time < 1311999988888
T props p.group_id = 'some group ID'
T props p.group_id LIKE 'some%ID'
F props p.group_id = 'other group ID'
T props p.group_sequence = 999
T props p.group_sequence >= 999
F props p.group_sequence > 999
T props p.reply_to_group_id = 'other group ID'
T props p.reply_to_group_id LIKE '%group ID'
T props p.reply_to_group_id != 'some group ID'
T props p.reply_to_group_id IS NOT NULL
F props p.reply_to_group_id IS NULL
T props p.message_id = 'id-123' AND 'some subject' = p.subject
T props p.group_sequence < 500 OR p.correlation_id > 700
T props (p.content_type LIKE 'text/%') AND p.content_encoding = 'deflate'
T - p.subject IS NULL
F - p.subject IS NOT NULL
# quirk: timestamps are plain milliseconds, so they compare and compute with numbers
T props p.creation_time + 1 = 1311704463522
T props p.absolute_expiry_time - p.creation_time = 295525367
T props p.creation_time BETWEEN 1311704463000 AND 1311704464000
# quirk: a uuid is its 16 bytes (a binary)
T uuidmsg p.message_id = 0x12345678123456781234567812345678
F uuidmsg p.message_id = '12345678-1234-5678-1234-567812345678'
# --- UTC() (RabbitMQ utc_function) ---
T - UTC() > 1000000000000
T - UTC() < 9999999999999
T - UTC() < UTC() + 30000
T - UTC() > UTC() - 30000
T props UTC() >= p.creation_time
T props p.creation_time <= UTC()
F props p.creation_time >= UTC()
T props UTC() - properties.creation_time > 0
T - p.creation_time IS NULL AND UTC() > 0
T - UTC ( ) > 0
T - (UTC()) > 0
E - UTC(123)
E - UTC( 123 )
E - UTC('arg')
E - UTC(TRUE)
E - UTC
E - UTC() = UTC
# --- value types as RabbitMQ sees them ---
T types sym = 'abc'
T types sym = str
T types sym LIKE 'a%'
T types sym LIKE 'a_c'
T types str = bin
T types sym = bin
T types uid = 0x00000000000000000000000000000102
T types ch = 65
F types ch = 'A'
T types ts = 1000
T types ts + 1 = 1001
T types ul = 18446744073709551615
T types ul + 1 = 18446744073709551616
T bigint big = 1180591620717411303424
T bigint big > 1.0E20
T types dec IS NULL
U types dec = 1.5
T types lst IS NULL
U types lst = 1
T types map IS NULL
# one behaviour with the property filters: a dropped value is null here, absent there
T dropped arr IS NULL
T dropped desc IS NULL
T dropped dec IS NULL
T dropped ninf IS NULL
U dropped desc = 1
U dropped dec <> 2.5
U dropped ninf < 0
U dropped arr IN (1, 2)
T dropped n = 1 AND dec IS NULL AND arr IS NULL
T types nul IS NULL
U types nul = nul
T types f = 1.5
T types i = 3.0
T types t
F types fa
U types f
T types neg % 4 = -3
# --- functions are reserved by RabbitMQ 4.2: ours are extensions ---
T types LOWER('ABC') = 'abc'
T types UPPER(str) = 'ABC'
T types UPPER(sym) = 'ABC'
T types LOWER(sym) = 'abc'
U types LOWER(i) = '3'
U types LOWER(nul) = 'a'
U types UPPER(bin) = 'ABC'
T - LEFT('abcdef', 2) = 'ab'
T - RIGHT('abcdef', 2) = 'ef'
T - LEFT('ab', 5) = 'ab'
T - RIGHT('ab', 5) = 'ab'
T - LEFT('ab', 0) = ''
T - RIGHT('ab', 0) = ''
U - LEFT('ab', -1) = ''
U - LEFT('ab', 1.0) = 'a'
U - LEFT(5, 1) = '5'
T - SUBSTRING('abcdef', 2) = 'bcdef'
T - SUBSTRING('abcdef', 2, 3) = 'bcd'
T - SUBSTRING('abcdef', 0, 3) = 'ab'
T - SUBSTRING('abcdef', 5, 10) = 'ef'
T - SUBSTRING('abcdef', 10) = ''
U - SUBSTRING('abcdef', 'a') = ''
U - SUBSTRING('abcdef', 1, -2) = ''
T props LEFT(p.subject, 4) = 'some'
T props UPPER(p.group_id) LIKE 'SOME%'
T - DATE('1970-01-01T00:00:00Z') = 0
T - DATE('1970-01-01T00:00:01.500Z') = 1500
T - DATE('2011-07-26') = 1311638400000
T - DATE('1970-01-01T01:00:00+01:00') = 0
T props p.creation_time > DATE('2011-07-26T00:00:00Z')
E - DATE('not a date') > 0
U rmq DATE(city) > 0
U rmq DATE(weight) > 0
E - LOWER()
E - LOWER('a', 'b')
E - LEFT('a')
E - SUBSTRING('a')
E - SUBSTRING('a', 1, 2, 3)
E - FOO('a')
E - Lower('A')
# --- BETWEEN (extension) ---
T rmq weight BETWEEN 1 AND 10
T rmq weight BETWEEN 5 AND 5
F rmq weight BETWEEN 6 AND 10
T rmq weight NOT BETWEEN 6 AND 10
F rmq weight NOT BETWEEN 1 AND 10
T rmq price BETWEEN 10 AND 11
T rmq country BETWEEN 'A' AND 'Z'
F rmq country BETWEEN 1 AND 10
U rmq absent BETWEEN 1 AND 10
U rmq absent NOT BETWEEN 1 AND 10
U rmq weight BETWEEN absent AND 10
F rmq weight BETWEEN absent AND 1
T rmq weight BETWEEN 1 AND 10 AND country = 'UK'
T rmq weight + 1 BETWEEN 2 * 3 AND 7
F rmq active BETWEEN FALSE AND TRUE
E - weight BETWEEN 1
E - weight BETWEEN 1 OR 2
E - weight BETWEEN 1 AND 2 AND
# --- EXISTS and element references (extension) ---
T rmq EXISTS(weight)
T rmq EXISTS missing
F rmq EXISTS(absent)
T rmq NOT EXISTS(absent)
T annot EXISTS(m.[x-opt-region])
T annot m.[x-opt-region] = 'EMEA'
T annot message_annotations.rank = 3
T annot m.rank > 2
T annot f.checksum = 'abc'
T annot footer.checksum LIKE 'a%'
F annot EXISTS(f.other)
T annot items[0]['sku'] = 'A1'
T annot items[0]["qty"] = 2
T annot items[1]['sku'] = 'B2'
T annot items[1]['qty'] IS NULL
T annot EXISTS(items[1])
F annot EXISTS(items[2])
T annot EXISTS(items[0]['qty'])
F annot EXISTS(items[1]['qty'])
T annot tags['color'] = 'red'
T annot a.tags['color'] = 'red'
T annot items IS NULL
U annot items = 1
T types lst[0] = 1
T types lst[1] = 'two'
T types lst[2][0] = 3
T types lst[3] IS NULL
T types map['k'] = 'v'
T types map['s'] = 5
T types map['n']['deep']
T types map IS NULL
T types str[0] IS NULL
F types EXISTS(str[0])
E - x[a]
E - x[-1]
E - x['a]
E - x[1.5]
# --- INF and NAN (extension; RabbitMQ reserves the words) ---
T - INF > 1.0E308
T - -INF < -1.0E308
T - INF = INF
F - NAN = NAN
T - NAN <> NAN
F - NAN > 0
F - NAN < 0
# quirk: NaN and ±inf in a message are kept "as is" by RabbitMQ's parser: not simple, dropped
U types [inf] = INF
U types [nan] = NAN
U types [nan] <> NAN
T types [nan] IS NULL
T types [inf] IS NULL
U types [inf] > 0
U types [inf] IN (1.5, 2)
U types [nan] BETWEEN 1 AND 2
F - INF - INF = 0
T - INF - INF <> INF - INF
'''

#: rows that the one-line text format cannot hold (control characters, whitespace at the ends)
EXTRA_CASES: list[tuple[str, str, str]] = [
    ("T", "-", "'''' = \"'\""),
    ("T", "rmq", "country\t=\t'UK'"),
    ("T", "rmq", "country\f=\f'UK'"),
    ("T", "rmq", "country\n=\n'UK'"),
    ("T", "rmq", "country\r=\r'UK'"),
    ("T", "rmq", "country \t\f\n\r = \t\f\n\r 'UK'"),
    ("T", "rmq", "country\t=\t'UK'\nAND\rweight\f>\t3"),
    ("T", "rmq", " \t\n\r country = 'UK' \t\n\r "),
    ("E", "-", "country\v= 'UK'"),
    ("E", "-", "country\u00a0= 'UK'"),
    ("E", "-", "[\n]"),
    ("E", "-", "[\r]"),
    ("E", "-", "[a\x7fb]"),
    ("E", "-", "id LIKE '\n'"),
    ("E", "-", "id LIKE '\r'"),
    ("E", "-", "id LIKE '_\n'"),
    ("E", "-", "id LIKE '%\r'"),
    ("E", "-", "id LIKE '!\r' ESCAPE '!'"),
    ("E", "-", "id LIKE 'a\x7f'"),
    ("T", "types", "nl2 = 'a\nb'"),
    ("T", "-", "'a\tb' LIKE 'a%b'"),
    ("E", "-", "x" * 4096 + " IS NULL"),
    ("T", "-", "x" * 4088 + " IS NULL"),
    ("E", "-", "id IN (" + ",".join(f"'{n}'" for n in range(1, 101)) + ")"),
    # exactly 200 tokens is allowed, 201 is not
    ("F", "-", "NOT '98' IN (" + ",".join(f"'{n}'" for n in range(1, 99)) + ")"),
    ("E", "-", "NOT '99' IN (" + ",".join(f"'{n}'" for n in range(1, 100)) + ")"),
    ("T", "rmq", "(" * 40 + "weight = 5" + ")" * 40),
]


def rows() -> list[tuple[str, str, str]]:
    """Every (expected, message, expression) row of the table."""
    out = []
    for line in _TABLE.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split(" ", 2)
        expected, message = parts[0], parts[1]
        expression = parts[2] if len(parts) > 2 else ""
        out.append((expected, message, expression))
    return out + EXTRA_CASES


CASES = rows()
