/* librdkafka driven from C, for benches/kafka-client.sh: the same rows as its confluent-kafka
 * ones without a Python interpreter in the loop.
 *
 *   rdkafka-bench produce BOOTSTRAP TOPIC N   N x 100 B records to partition 0 (linger.ms 5,
 *                                             batch.size 1048576, acks all, idempotent, no
 *                                             compression); the first before the clock starts
 *   rdkafka-bench consume BOOTSTRAP TOPIC N   N records of partition 0 from offset 0; the clock
 *                                             starts at the first record
 *
 * Prints "<records/s> <librdkafka threads' CPU ticks> <main thread's CPU ticks>" (utime + stime
 * from /proc/self/task/<tid>/stat just before exiting). Built by the script against the
 * system's librdkafka (Debian's librdkafka-dev).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what, const char *why) {
  fprintf(stderr, "rdkafka-bench: %s: %s\n", what, why);
  exit(1);
}

static void set(rd_kafka_conf_t *conf, const char *k, const char *v) {
  char err[512];
  if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) die(k, err);
}

/* CPU ticks of this process's threads: librdkafka's (named rdk:*) and the main one. */
static void cpu(long *rdk, long *main_thread) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  *rdk = *main_thread = 0;
  if (!d) return;
  while ((e = readdir(d))) {
    char path[300], buf[1024];
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *open = strchr(buf, '('), *close = strrchr(buf, ')');
    if (!open || !close) continue;
    long ut = 0, st = 0;
    /* After ") ": state, then fields 4..; utime and stime are the 14th and 15th. */
    if (sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &ut, &st) != 2)
      continue;
    if (atoi(e->d_name) == getpid())
      *main_thread += ut + st;
    else if (strncmp(open + 1, "rdk:", 4) == 0)
      *rdk += ut + st;
  }
  closedir(d);
}

static long acked, failed;
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
  (void)rk;
  (void)opaque;
  if (m->err) failed++;
  else acked++;
}

static int produce(const char *boot, const char *topic, long n) {
  char err[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  set(conf, "bootstrap.servers", boot);
  set(conf, "linger.ms", "5");
  set(conf, "batch.size", "1048576");
  set(conf, "acks", "all");
  set(conf, "enable.idempotence", "true");
  set(conf, "compression.type", "none");
  rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (!rk) die("producer", err);
  char value[100];
  memset(value, 'x', sizeof value);
  /* The first goes before the clock starts. */
  if (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
                        RD_KAFKA_V_VALUE(value, sizeof value),
                        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END))
    die("produce", "first record");
  rd_kafka_flush(rk, 30000);
  double t0 = now();
  for (long i = 1; i < n; i++) {
    for (;;) {
      rd_kafka_resp_err_t e =
          rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
                            RD_KAFKA_V_VALUE(value, sizeof value),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
      if (!e) break;
      if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) die("produce", rd_kafka_err2str(e));
      rd_kafka_poll(rk, 1);
    }
    if (i % 10000 == 0) rd_kafka_poll(rk, 0);
  }
  rd_kafka_flush(rk, 120000);
  double t = now() - t0;
  if (acked != n || failed) {
    fprintf(stderr, "rdkafka-bench: %ld of %ld acknowledged, %ld failed\n", acked, n, failed);
    return 1;
  }
  long rdk, main_thread;
  cpu(&rdk, &main_thread);
  printf("%.0f %ld %ld\n", (n - 1) / t, rdk, main_thread);
  rd_kafka_destroy(rk);
  return 0;
}

static int consume(const char *boot, const char *topic, long n) {
  char err[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  set(conf, "bootstrap.servers", boot);
  set(conf, "group.id", "bench-unused");
  set(conf, "enable.auto.commit", "false");
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  if (!rk) die("consumer", err);
  rd_kafka_poll_set_consumer(rk);
  rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(parts, topic, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
  if (rd_kafka_assign(rk, parts)) die("assign", topic);
  rd_kafka_topic_partition_list_destroy(parts);
  long got = 0;
  double t0 = 0;
  while (got < n) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 10000);
    if (!m) {
      fprintf(stderr, "rdkafka-bench: no record for 10 s after %ld\n", got);
      return 1;
    }
    if (m->err) die("consume", rd_kafka_message_errstr(m));
    if (got++ == 0) t0 = now(); /* the clock starts at the first record */
    rd_kafka_message_destroy(m);
  }
  double t = now() - t0;
  long rdk, main_thread;
  cpu(&rdk, &main_thread);
  printf("%.0f %ld %ld\n", (n - 1) / t, rdk, main_thread);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: rdkafka-bench produce|consume BOOTSTRAP TOPIC N\n");
    return 2;
  }
  long n = atol(argv[4]);
  if (n < 2) die("N", "at least 2");
  if (strcmp(argv[1], "produce") == 0) return produce(argv[2], argv[3], n);
  if (strcmp(argv[1], "consume") == 0) return consume(argv[2], argv[3], n);
  fprintf(stderr, "usage: rdkafka-bench produce|consume BOOTSTRAP TOPIC N\n");
  return 2;
}
