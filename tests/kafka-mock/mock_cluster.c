/*
 * A multi-broker Kafka cluster that nobody here wrote: librdkafka's mock
 * cluster (rdkafka_mock.h, Debian's librdkafka-dev), driven line by line
 * from stdin, for tests/e2e_kafka_mock.rs. Also hosts librdkafka consumers
 * that join groups beside the SDK's members.
 *
 *   mock_cluster N        starts N brokers (ids 1..N), prints "bootstrap HOST:PORT,..."
 *
 * Commands (one per line; each answered "ok" or "error WHY" on stdout):
 *   topic NAME PARTITIONS           create a topic (leaders spread over the brokers)
 *   leader TOPIC PARTITION BROKER   move a partition's leader
 *   down BROKER / up BROKER         take a broker down (connections closed) / up
 *   consumer NAME GROUP TOPIC ASSIGNOR
 *                                   a librdkafka consumer of TOPIC in GROUP (a thread
 *                                   polling it); it prints "assigned NAME P,P,..." on
 *                                   every rebalance and "record NAME P OFFSET" per record
 *   stop NAME                       close that consumer (it leaves the group)
 * End of input stops the consumers and the cluster.
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&out_lock);
  va_start(ap, fmt);
  vfprintf(stdout, fmt, ap);
  va_end(ap);
  fputc('\n', stdout);
  fflush(stdout);
  pthread_mutex_unlock(&out_lock);
}

#define MAX_CONSUMERS 8

struct consumer {
  char name[128];
  rd_kafka_t *rk;
  pthread_t thread;
  volatile int stop;
  int used;
};

static struct consumer consumers[MAX_CONSUMERS];
static const char *bootstraps;

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque) {
  struct consumer *c = opaque;
  int cooperative = !strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE");
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    if (cooperative)
      rd_kafka_error_destroy(rd_kafka_incremental_assign(rk, parts));
    else
      rd_kafka_assign(rk, parts);
  } else {
    if (cooperative)
      rd_kafka_error_destroy(rd_kafka_incremental_unassign(rk, parts));
    else
      rd_kafka_assign(rk, NULL);
  }
  rd_kafka_topic_partition_list_t *now = NULL;
  char line[1024] = "";
  size_t at = 0;
  if (rd_kafka_assignment(rk, &now) == RD_KAFKA_RESP_ERR_NO_ERROR && now) {
    for (int i = 0; i < now->cnt && at < sizeof(line) - 16; i++)
      at += (size_t)snprintf(line + at, sizeof(line) - at, "%s%d", i ? "," : "",
                             (int)now->elems[i].partition);
    rd_kafka_topic_partition_list_destroy(now);
  }
  say("assigned %s %s", c->name, at ? line : "-");
}

static void *consume(void *arg) {
  struct consumer *c = arg;
  while (!c->stop) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, 50);
    if (!m)
      continue;
    if (!m->err)
      say("record %s %d %lld", c->name, (int)m->partition, (long long)m->offset);
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(c->rk);
  rd_kafka_destroy(c->rk);
  return NULL;
}

static int start_consumer(const char *name, const char *group, const char *topic,
                          const char *assignor, char *err, size_t errlen) {
  struct consumer *c = NULL;
  for (int i = 0; i < MAX_CONSUMERS; i++)
    if (!consumers[i].used) {
      c = &consumers[i];
      break;
    }
  if (!c) {
    snprintf(err, errlen, "too many consumers");
    return -1;
  }
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  const char *settings[][2] = {
      {"bootstrap.servers", bootstraps},
      {"group.id", group},
      {"partition.assignment.strategy", assignor},
      {"auto.offset.reset", "earliest"},
      {"session.timeout.ms", "6000"},
      {"heartbeat.interval.ms", "100"},
      {"topic.metadata.refresh.interval.ms", "500"},
      {"log_level", "3"},
  };
  for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++)
    if (rd_kafka_conf_set(conf, settings[i][0], settings[i][1], err, errlen) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return -1;
    }
  snprintf(c->name, sizeof(c->name), "%s", name);
  rd_kafka_conf_set_opaque(conf, c);
  rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
  c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, errlen);
  if (!c->rk)
    return -1;
  rd_kafka_poll_set_consumer(c->rk);
  rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(sub, topic, RD_KAFKA_PARTITION_UA);
  rd_kafka_resp_err_t e = rd_kafka_subscribe(c->rk, sub);
  rd_kafka_topic_partition_list_destroy(sub);
  if (e) {
    snprintf(err, errlen, "subscribe: %s", rd_kafka_err2str(e));
    rd_kafka_destroy(c->rk);
    return -1;
  }
  c->stop = 0;
  c->used = 1;
  pthread_create(&c->thread, NULL, consume, c);
  return 0;
}

static int stop_consumer(const char *name) {
  for (int i = 0; i < MAX_CONSUMERS; i++)
    if (consumers[i].used && !strcmp(consumers[i].name, name)) {
      consumers[i].stop = 1;
      pthread_join(consumers[i].thread, NULL);
      consumers[i].used = 0;
      return 0;
    }
  return -1;
}

int main(int argc, char **argv) {
  int brokers = argc > 1 ? atoi(argv[1]) : 3;
  char err[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "3", err, sizeof(err));
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
  if (!rk) {
    fprintf(stderr, "rd_kafka_new: %s\n", err);
    return 1;
  }
  rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
  if (!mc) {
    fprintf(stderr, "rd_kafka_mock_cluster_new failed\n");
    return 1;
  }
  bootstraps = rd_kafka_mock_cluster_bootstraps(mc);
  say("bootstrap %s", bootstraps);
  char line[512];
  while (fgets(line, sizeof(line), stdin)) {
    char a[128], b[128], c[128], d[128];
    int n = 0, m = 0;
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (sscanf(line, "topic %127s %d", a, &n) == 2)
      e = rd_kafka_mock_topic_create(mc, a, n, brokers);
    else if (sscanf(line, "leader %127s %d %d", a, &n, &m) == 3)
      e = rd_kafka_mock_partition_set_leader(mc, a, n, m);
    else if (sscanf(line, "down %d", &n) == 1)
      e = rd_kafka_mock_broker_set_down(mc, n);
    else if (sscanf(line, "up %d", &n) == 1)
      e = rd_kafka_mock_broker_set_up(mc, n);
    else if (sscanf(line, "consumer %127s %127s %127s %127s", a, b, c, d) == 4) {
      if (start_consumer(a, b, c, d, err, sizeof(err))) {
        say("error %s", err);
        continue;
      }
    } else if (sscanf(line, "stop %127s", a) == 1) {
      if (stop_consumer(a)) {
        say("error no consumer %s", a);
        continue;
      }
    } else {
      say("error unknown command");
      continue;
    }
    if (e)
      say("error %s", rd_kafka_err2str(e));
    else
      say("ok");
  }
  for (int i = 0; i < MAX_CONSUMERS; i++)
    if (consumers[i].used)
      stop_consumer(consumers[i].name);
  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(rk);
  return 0;
}
