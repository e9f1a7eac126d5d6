#!/usr/bin/env python3
"""confluent-kafka (librdkafka) over SASL_SSL against a broker with TLS and --auth required.

    python confluent_secure.py BOOTSTRAP CA_PEM USER PASSWORD TOPIC login MECHANISM...
    python confluent_secure.py BOOTSTRAP CA_PEM USER PASSWORD TOPIC wrong MECHANISM
    python confluent_secure.py BOOTSTRAP CA_PEM ADMIN PASSWORD TOPIC users MECHANISM

login: for each mechanism (SCRAM-SHA-256, SCRAM-SHA-512), produce three records and
consume them back, verifying the broker's certificate against CA_PEM. wrong: a wrong
password must fail (run after every good login: failed logins are limited per address).
users (USER is an admin, --admin-user): the admin client adds a user with
alter_user_scram_credentials (an upsertion of MECHANISM), describes it, a producer logs in
as that user with MECHANISM and produces, then the credential is deleted and the user is
gone (describe: RESOURCE_NOT_FOUND).
One `PASS|FAIL confluent <scenario>` line each on stdout.
"""

import sys
import time
import traceback

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

BOOTSTRAP, CA, USER, PASSWORD, TOPIC, MODE = sys.argv[1:7]
MECHANISMS = sys.argv[7:]
DEADLINE_S = 15


def conf(mechanism, password=PASSWORD, **extra):
    c = {
        "bootstrap.servers": BOOTSTRAP,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": CA,
        "ssl.endpoint.identification.algorithm": "https",
        "sasl.mechanisms": mechanism,
        "sasl.username": USER,
        "sasl.password": password,
        "socket.timeout.ms": 5000,
        "socket.connection.setup.timeout.ms": 5000,
        "reconnect.backoff.max.ms": 1000,
    }
    c.update(extra)
    return c


def produce_consume(mechanism):
    values = [f"{mechanism}-{i}".encode() for i in range(3)]
    p = Producer(conf(mechanism, **{"message.timeout.ms": 10000}))
    errors = []
    for v in values:
        p.produce(TOPIC, v, partition=0, on_delivery=lambda e, m: e and errors.append(e))
    left = p.flush(DEADLINE_S)
    if left or errors:
        raise RuntimeError(f"{left} records not delivered, errors {errors}")
    c = Consumer(conf(mechanism, **{"group.id": f"secure-{mechanism}", "enable.auto.commit": False}))
    try:
        # Each mechanism's records come after the previous one's: read all, keep ours.
        c.assign([TopicPartition(TOPIC, 0, 0)])
        got = []
        end = time.time() + DEADLINE_S
        while time.time() < end and not all(v in got for v in values):
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            got.append(m.value())
        missing = [v for v in values if v not in got]
        if missing:
            raise RuntimeError(f"not consumed: {missing}")
    finally:
        c.close()


def wrong_password():
    errors = []
    p = Producer(
        conf(
            MECHANISMS[0],
            password=PASSWORD + "-wrong",
            **{"message.timeout.ms": 3000, "error_cb": lambda e: errors.append(e)},
        )
    )
    p.produce(TOPIC, b"must not arrive", partition=0)
    left = p.flush(6)
    auth_errors = [e for e in errors if "auth" in str(e).lower() or "SASL" in str(e)]
    if left == 0 and not auth_errors:
        raise RuntimeError("a wrong password produced")
    if not auth_errors:
        raise RuntimeError(f"no authentication error reported (errors: {errors})")


def scram_users(mechanism_name):
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    mechanism = getattr(ScramMechanism, mechanism_name.replace("-", "_"))
    user, password, iterations = "kc-made", b"made-over-kafka", 8192
    admin = AdminClient(conf(mechanism_name))
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password)
    for f in admin.alter_user_scram_credentials([upsert], request_timeout=DEADLINE_S).values():
        f.result()
    described = admin.describe_user_scram_credentials([user], request_timeout=DEADLINE_S)[user].result()
    infos = [(i.mechanism, i.iterations) for i in described.scram_credential_infos]
    if infos != [(mechanism, iterations)]:
        raise RuntimeError(f"described {infos}")
    # The new user logs in with the password the admin set, and produces.
    errors = []
    p = Producer(
        {
            **conf(mechanism_name, **{"message.timeout.ms": 10000}),
            "sasl.username": user,
            "sasl.password": password.decode(),
        }
    )
    p.produce(TOPIC, b"from a user made over Kafka's API", partition=0, on_delivery=lambda e, m: e and errors.append(e))
    left = p.flush(DEADLINE_S)
    if left or errors:
        raise RuntimeError(f"the new user's record: {left} not delivered, errors {errors}")
    deletion = UserScramCredentialDeletion(user, mechanism)
    for f in admin.alter_user_scram_credentials([deletion], request_timeout=DEADLINE_S).values():
        f.result()
    try:
        gone = admin.describe_user_scram_credentials([user], request_timeout=DEADLINE_S)[user].result()
    except KafkaException as e:
        if "RESOURCE_NOT_FOUND" not in str(e.args[0].name() if e.args else e):
            raise
    else:
        raise RuntimeError(f"the deleted user is still described: {gone}")


def run(name, fn, *args):
    t0 = time.time()
    try:
        fn(*args)
        print(f"PASS confluent {name} ({time.time() - t0:.1f}s)", flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is one FAIL line
        traceback.print_exc(file=sys.stderr)
        print(f"FAIL confluent {name}: {e}"[:400], flush=True)


if MODE == "login":
    for m in MECHANISMS:
        run(f"sasl-ssl-{m.lower()}", produce_consume, m)
elif MODE == "users":
    for m in MECHANISMS:
        run(f"scram-users-over-kafka-{m.lower()}", scram_users, m)
else:
    run("sasl-ssl-wrong-password", wrong_password)
