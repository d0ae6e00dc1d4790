"""The selector dialect's case table: messages and (expected, message, selector) rows.

Expected: T (true), F (false), U (unknown), E (refused: FilterError). ActiveMQ and Artemis only
tell a match (T) from no match (F or U); each row states our exact three-valued result.
Sources, per block:
- [amq] ActiveMQ Classic ``activemq-unit-tests/.../selector/SelectorTest.java`` (``createMessage``
  is the message ``amq`` below: JMSType and JMSMessageID become AMQP subject and message-id);
- [art] Artemis ``artemis-selector/.../selector/SelectorTest.java`` (same message and rows as
  [amq] where they agree; the rows here are the ones it adds);
- [rmq] RocketMQ ``filter/src/test/.../ExpressionTest.java`` (its properties are all strings and
  it converts them to numbers; the JMS semantics we follow do not, so its rows are written with
  typed values, and one row shows the difference);
- [jms] Jakarta Messaging 3.1 §3.8.1 and the Qpid JMS mapping (``AmqpJmsMessageFacade``,
  ``AmqpMessageIdHelper``); [ours] our own choices (docs/sql-filters.md, *JMS selectors*).
"""

from __future__ import annotations

import uuid

from proton import symbol, timestamp, ulong

__all__ = ["MESSAGES", "CASES"]

MESSAGES: dict[str, dict[str, dict]] = {
    "-": {},
    "amq": {
        "properties": {"subject": "selector-test", "message_id": "connection:1:1:1:1",
                       "to": "FOO.BAR"},
        "application_properties": {
            "name": "James", "location": "London", "byteProp": 123, "byteProp2": 33,
            "shortProp": 123, "intProp": 123, "longProp": 123, "floatProp": 123.0,
            "doubleProp": 123.0, "rank": 123, "version": 2, "quote": "'In God We Trust'",
            "foo": "_foo", "punctuation": "!#$&()*+,-./:;<=>?@[\\]^`{|}~", "trueProp": True,
            "falseProp": False}},
    "amq_id": {"properties": {"subject": "selector-test", "message_id": "id:test:1:1:1:1"}},
    "amq_1001": {"properties": {"subject": "1001"}},
    "model1": {"application_properties": {
        "modelClassId": "com.whatever.something.foo.bar", "modelInstanceId": "170",
        "modelRequestError": "abc", "modelCorrelatedClientId": "whatever"}},
    "model2": {"application_properties": {
        "modelClassId": "com.whatever.something.foo.bar", "modelInstanceId": "170",
        "modelRequestError": "abc", "modelCorrelatedClientId": "shouldFailNow"}},
    "model3": {"application_properties": {
        "modelClassId": "com.whatever.something.foo.bar", "modelInstanceId": "170",
        "modelCorrelatedClientId": "shouldNotMatch"}},
    "mats1": {"application_properties": {"SessionserverId": 1870414179}},
    "mats2": {"application_properties": {"SessionserverId": 1234, "Command": "Cheese"}},
    "mats3": {"application_properties": {"Command": "MirrorLobbyRequest"}},
    "rocket_and": {"application_properties": {"a": 3, "b": 5, "c": 6, "d": 1}},
    "rocket_and_f": {"application_properties": {"a": 4, "b": 5, "c": 6, "d": 1}},
    "rocket_str": {"application_properties": {"a": "3", "b": "5", "c": "6", "d": 1}},
    "rocket_hello": {"application_properties": {"a": "hello"}},
    "rocket_abc": {"application_properties": {"a": "abc"}},
    "rocket_tags": {"application_properties": {"TAGS": "''tag''"}},
    "rocket_bool": {"application_properties": {"a": True, "b": False}},
    "rocket_2": {"application_properties": {"a": 2}},
    "rocket_11": {"application_properties": {"a": 11}},
    # JMS headers as Qpid JMS maps them from AMQP fields
    "jms": {"header": {"durable": True, "priority": 7, "delivery_count": 2},
            "properties": {"message_id": "ID:abc:1", "correlation_id": "order-7",
                           "subject": "invoice", "to": "queue://orders",
                           "reply_to": "queue://replies", "user_id": b"alice",
                           "group_id": "g1", "group_sequence": 5,
                           "creation_time": timestamp(1700000000000),
                           "absolute_expiry_time": timestamp(1700000060000)},
            "application_properties": {"JMSX": "app", "a.b": "dotted", "$x": 1, "_y": 2,
                                       "color": "red", "n": 5, "s": "abc", "f": 2.5,
                                       "ok": True, "no": False}},
    # a header ttl and no absolute-expiry-time: JMSExpiration is the time of reading + ttl
    "jms_ttl": {"header": {"ttl": 60000}, "properties": {"creation_time": timestamp(1700000000000)}},
    "jms_ttl0": {"header": {"ttl": 0}},
    "jms_both": {"header": {"ttl": 60000},
                 "properties": {"absolute_expiry_time": timestamp(1700000090000)}},
    "jms_bare": {"properties": {"message_id": "plain-id", "correlation_id": "ID:corr"}},
    "jms_uuid": {"properties": {"message_id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
                                "correlation_id": ulong(42)}},
    "jms_bin": {"properties": {"message_id": b"\x01\xab", "correlation_id": "ID:AMQP_ULONG:3"}},
    "annot": {"message_annotations": {symbol("x-opt-region"): "EMEA", symbol("rank"): 3},
              "application_properties": {"m.rank": "app"}},
    "text": {"application_properties": {"tag": "TagA||TagB", "pct": "50%_off", "e": ""}},
}

_TABLE = r"""
# --- [amq] testBooleanSelector
T amq (trueProp OR falseProp) AND trueProp
F amq (trueProp OR falseProp) AND falseProp
T amq trueProp
# --- [amq] testJMSPropertySelectors
T amq_id JMSType = 'selector-test'
F amq_id JMSType = 'crap'
F amq_id JMSMessageID = 'id:test:1:1:1:1'
T amq_id JMSMessageID = 'ID:AMQP_NO_PREFIX:id:test:1:1:1:1'
F amq_id JMSMessageID = 'id:not-test:1:1:1:1'
T amq_1001 JMSType='1001'
T amq_1001 JMSType='1001' OR JMSType='1002'
F amq_1001 JMSType = 'crap'
# --- [amq] testBasicSelectors
T amq name = 'James'
T amq rank > 100
T amq rank >= 123
F amq rank >= 124
# --- [amq] testPropertyTypes
T amq byteProp = 123
F amq byteProp = 10
T amq byteProp2 = 33
F amq byteProp2 = 10
T amq shortProp = 123
F amq shortProp = 10
T amq intProp = 123
F amq intProp = 10
T amq longProp = 123
F amq longProp = 10
T amq floatProp = 123
F amq floatProp = 10
T amq doubleProp = 123
F amq doubleProp = 10
# --- [amq] testAndSelectors
T amq name = 'James' and rank < 200
F amq name = 'James' and rank > 200
F amq name = 'Foo' and rank < 200
U amq unknown = 'Foo' and anotherUnknown < 200
# --- [amq] testOrSelectors
T amq name = 'James' or rank < 200
T amq name = 'James' or rank > 200
T amq name = 'Foo' or rank < 200
F amq name = 'Foo' or rank > 200
U amq unknown = 'Foo' or anotherUnknown < 200
# --- [amq] testPlus (string concatenation with + is an ActiveMQ extension we do not follow)
T amq rank + 2 = 125
T amq (rank + 2) = 125
T amq 125 = (rank + 2)
T amq rank + version = 125
F amq rank + 2 < 124
U amq name + '!' = 'James!'
# --- [amq] testMinus, testMultiply, testDivide
T amq rank - 2 = 121
T amq rank - version = 121
F amq rank - 2 > 122
T amq rank * 2 = 246
T amq rank * version = 246
F amq rank * 2 < 130
T amq rank / version = 61.5
F amq rank / 3 > 100.0
F amq rank / 3 > 100
T amq version / 2 = 1
# --- [amq] testBetween, testIn, testIsNull
T amq rank between 100 and 150
F amq rank between 10 and 120
T amq name in ('James', 'Bob', 'Gromit')
T amq name in ('Bob', 'James', 'Gromit')
T amq name in ('Gromit', 'Bob', 'James')
F amq name in ('Gromit', 'Bob', 'Cheddar')
T amq name not in ('Gromit', 'Bob', 'Cheddar')
T amq dummy is null
F amq dummy is not null
T amq name is not null
F amq name is null
# --- [amq] testLike
T model1 modelClassId LIKE 'com.whatever.something.%' AND modelInstanceId = '170' AND (modelRequestError IS NULL OR modelCorrelatedClientId = 'whatever')
F model2 modelClassId LIKE 'com.whatever.something.%' AND modelInstanceId = '170' AND (modelRequestError IS NULL OR modelCorrelatedClientId = 'whatever')
T model3 modelClassId LIKE 'com.whatever.something.%' AND modelInstanceId = '170' AND (modelRequestError IS NULL OR modelCorrelatedClientId = 'whatever')
# --- [amq] testMatsHenricsonUseCases
U - SessionserverId=1870414179
T mats1 SessionserverId=1870414179
F mats2 SessionserverId=1870414179
U mats1 Command NOT IN ('MirrorLobbyRequest', 'MirrorLobbyReply')
T mats2 Command NOT IN ('MirrorLobbyRequest', 'MirrorLobbyReply')
F mats3 Command NOT IN ('MirrorLobbyRequest', 'MirrorLobbyReply')
# --- [amq] testFloatComparisons
T - 1.0 < 1.1
T - -1.1 < 1.0
T - 1.0E1 < 1.1E1
T - -1.1E1 < 1.0E1
T - 1. < 1.1
T - -1.1 < 1.
T - 1.E1 < 1.1E1
T - -1.1E1 < 1.E1
T - .1 < .5
T - -.5 < .1
T - .1E1 < .5E1
T - -.5E1 < .1E1
T - 4E10 < 5E10
T - 5E8 < 5E10
T - -4E10 < 2E10
T - -5E8 < 2E2
T - 4E+10 < 5E+10
T - 4E-10 < 5E-10
# --- [amq] testStringQuoteParsing, testLikeComparisons
T amq quote = '''In God We Trust'''
T amq quote LIKE '''In G_d We Trust'''
F amq quote LIKE '''In Gd_ We Trust'''
F amq quote NOT LIKE '''In G_d We Trust'''
T amq quote NOT LIKE '''In Gd_ We Trust'''
T amq foo LIKE '%oo'
F amq foo LIKE '%ar'
F amq foo NOT LIKE '%oo'
T amq foo NOT LIKE '%ar'
T amq foo LIKE '!_%' ESCAPE '!'
F amq quote LIKE '!_%' ESCAPE '!'
F amq foo NOT LIKE '!_%' ESCAPE '!'
T amq quote NOT LIKE '!_%' ESCAPE '!'
T amq punctuation LIKE '!#$&()*+,-./:;<=>?@[\]^`{|}~'
# --- [amq] testInvalidSelector, [art] testInvalidSelector adds two
E - 3+5
E - True AND 3+5
E - =TEST 'test'
E - prop1 = prop2 foo AND string = 'Test'
E - a = 1 AMD  b = 2
# --- [rmq] ExpressionTest: and/or with mixed-case keywords
T rocket_and a=3 and b<>4 And c>5 AND d<=4
F rocket_and_f a=3 and b<>4 And c>5 AND d<=4
T rocket_and a=3 or b<>4 Or c>5 OR d<=4
# [rmq] converts the string '3' to a number; JMS (and we) compare strings and numbers as false
F rocket_str a=3 and b<>4 And c>5 AND d<=4
T rocket_hello a is not null and a='hello'
F - a is not null and a='hello'
T - a is null OR a='hello'
T rocket_hello a is null OR a='hello'
F rocket_abc a is null OR a='hello'
T rocket_tags TAGS is not null and TAGS='''''tag'''''
T rocket_bool a=TRUE OR b=FALSE
T rocket_2 a between 2 and 10
F rocket_11 a between 2 and 10
T rocket_11 a not between 2 and 10
F rocket_2 a not between 2 and 10
# --- [ours] RocketMQ's CONTAINS / STARTSWITH / ENDSWITH (its grammar; no test rows upstream)
T text tag CONTAINS 'TagB'
T text tag contains '||'
F text tag CONTAINS 'TagC'
T text tag NOT CONTAINS 'TagC'
T text tag STARTSWITH 'TagA'
F text tag STARTSWITH 'TagB'
T text tag ENDSWITH 'TagB'
T text tag not endswith 'TagA'
T text pct CONTAINS '%_'
F text tag CONTAINS '%'
T text pct STARTSWITH '50%'
F text tag STARTSWITH '_'
T text e CONTAINS ''
U text missing CONTAINS 'x'
U text missing NOT STARTSWITH 'x'
E - tag CONTAINS 5
E - CONTAINS = 1
# --- [jms] keywords in any case, identifiers case-sensitive and Java-like
T jms color = 'red' aNd n = 5
T jms NOT color = 'blue' OR TRUE
T jms Color IS NULL
T jms $x = 1 AND _y = 2
T jms a.b = 'dotted'
T jms JMSX = 'app'
E - and = 1
E - a = "double quoted"
E - a != 1
# --- [jms] NOT binds tighter than comparisons: NOT a = 1 is (NOT a) = 1
F jms NOT n = 5
T jms NOT (n = 6)
T jms NOT ok = FALSE
T jms (NOT ok) = FALSE
T jms NOT no
T jms NOT NOT ok
# --- [jms] a property used as a condition: false unless boolean; missing: unknown
T jms ok
F jms no
F jms color
T jms NOT color
F jms n AND ok
T jms n OR ok
U jms absent
U jms NOT absent
E - 5
E - 'x'
E - n + 1
E - ok AND 'x'
E - NOT (n + 1)
T - TRUE
F - FALSE
U - NULL
E - n = NULL
E - NULL <> n
E - n > 'a'
E - n <= TRUE
E - n > (m = 1)
T jms n > -1 AND s = 'abc' AND s <> 'x'
T jms n IS NOT NULL AND NOT NULL IS NULL
T jms NULL IS NULL
# --- [amq] LIKE on a value that is not a string is false (ActiveMQ's LikeExpression), so
# NOT LIKE is true; a missing one stays unknown
F jms n LIKE '5'
T jms n NOT LIKE '5'
T jms ok NOT LIKE 'x%'
F jms n CONTAINS '5'
U jms absent NOT LIKE 'x'
# --- [jms] no conversion between strings and numbers; division is a decimal
F jms n = '5'
F jms s = 5
F jms s > 1
T jms n / 2 = 2.5
T jms f * 2 = 5
T jms 7 / 2 = 3.5
# --- [jms] literals: L suffix, hex, octal; a long at most
T jms n = 5L
T jms n = 5l
T - 0x1F = 31
T - 0X1f = 31
T - 017 = 15
T - 0 = 0
T - 9223372036854775807 > 0
E - 9223372036854775808 = 0
E - 09 = 9
E - 0x = 0
E - 017L = 15
T - 1e3 = 1000
T - 2.5E-1 = .25
# --- [jms] the JMS headers mapped to AMQP fields as Qpid JMS reads them
T jms JMSMessageID = 'ID:abc:1'
T jms JMSCorrelationID = 'order-7'
T jms JMSPriority = 7
T - JMSPriority = 4
T jms JMSType = 'invoice'
T jms JMSDeliveryMode = 'PERSISTENT'
T - JMSDeliveryMode = 'NON_PERSISTENT'
F - JMSDeliveryMode = 'PERSISTENT'
T jms JMSRedelivered
T jms JMSRedelivered = TRUE
F - JMSRedelivered
T jms JMSXDeliveryCount = 3
T - JMSXDeliveryCount = 1
T jms JMSTimestamp = 1700000000000
T - JMSTimestamp = 0
T jms JMSExpiration - JMSTimestamp = 60000
T - JMSExpiration = 0
T jms_ttl JMSExpiration > 0
T jms_ttl JMSExpiration - JMSTimestamp > 60000
F jms_ttl JMSExpiration = 0
T jms_ttl0 JMSExpiration = 0
T jms_both JMSExpiration = 1700000090000
T jms JMSDestination = 'queue://orders'
T jms JMSReplyTo = 'queue://replies'
T jms JMSXUserID = 'alice'
U - JMSXUserID = 'alice'
T jms JMSXGroupID = 'g1' AND JMSXGroupSeq = 5
T - JMSXGroupSeq = 0
T jms_bare JMSMessageID = 'ID:AMQP_NO_PREFIX:plain-id'
T jms_bare JMSCorrelationID = 'ID:corr'
T jms_uuid JMSMessageID = 'ID:AMQP_UUID:12345678-1234-5678-1234-567812345678'
T jms_uuid JMSCorrelationID = 'ID:AMQP_ULONG:42'
T jms_bin JMSMessageID = 'ID:AMQP_BINARY:01AB'
T jms_bin JMSCorrelationID = 'ID:AMQP_STRING:ID:AMQP_ULONG:3'
U - JMSMessageID = 'x'
T - JMSMessageID IS NULL
U jms jmspriority = 7
# --- [ours] amqp.<field> and m.<key> / m.[key]
T jms amqp.subject = 'invoice' AND amqp.priority = 7 AND amqp.durable
T jms amqp.group_sequence = 5
E - amqp.nope = 1
T annot m.rank = 3
T annot m.[x-opt-region] = 'EMEA'
E - p.[x] = 1
# --- [jms] JMS 2.0 §3.8.1.1 and ActiveMQ's SelectorParser.jj: "identifier [NOT] IN
# (string-literal, ...)", BETWEEN is arithmetic; NOT binds tighter, so NOT color IN (...) is
# (NOT color) IN (...): no property on the left (ActiveMQ: "Expected a property")
E - n IN (1, 2)
E - n IN (1, 'a')
E - n NOT IN ('a', 2)
E - n IN ('a', NULL)
E - n IN ('a', s)
E - n + 1 IN ('a')
E - NOT color IN ('red')
E - color BETWEEN 'a' AND 'c'
E - n BETWEEN 1 AND 'c'
E - 'b' BETWEEN 1 AND 2
E - n BETWEEN TRUE AND 2
E - n NOT BETWEEN 1 AND NULL
E - (n = 1) BETWEEN 1 AND 2
F jms NOT (color IN ('red', 'blue'))
T jms NOT (color IN ('green'))
F jms color NOT IN ('red')
T jms JMSType IN ('invoice', 'order') AND JMSDeliveryMode IN ('PERSISTENT')
T jms n BETWEEN 4 AND 2 + 4
T jms n BETWEEN f AND 5.5
"""


def _rows() -> list[tuple[str, str, str]]:
    out = []
    for line in _TABLE.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        expected, message, expression = line.split(" ", 2)
        out.append((expected, message, expression))
    return out


CASES = _rows()
