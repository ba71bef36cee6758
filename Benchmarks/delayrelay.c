/*
 * delayrelay: a TCP relay that adds a fixed delay each way, for benchmarks on a kernel
 * without netem (Benchmarks/trees.sh builds it with `cc -O2 -pthread`).
 *
 *   delayrelay [-p LISTEN_PORT] [-d DELAY_MS] TARGET_HOST:TARGET_PORT
 *
 * Listens on 127.0.0.1 (port 0, any free port, unless -p), prints the port it listens on as
 * one line on stdout, and for every connection it accepts connects to the target and
 * forwards both ways, each chunk it reads held DELAY_MS (default 10) before it is written:
 * a round trip gains twice that. Bandwidth is not changed: per direction a reader thread
 * reads up to 256 KiB at a time and stamps each chunk with the time it is due into a queue,
 * and a writer thread writes each chunk when its time comes, so many chunks are in flight at
 * once (up to 64 MiB queued per direction before the reader waits). A half-close is
 * forwarded: when the reader sees end of file, the writer shuts the other side down for
 * writing (SHUT_WR) once the queue has drained, so `nc -N` and a sender's close work through
 * it. Runs until killed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { CHUNK = 256 << 10, MAX_QUEUED = 64 << 20 };

static long delay_ns = 10 * 1000000L;
static const char *target_host;
static const char *target_port;

struct chunk {
    struct chunk *next;
    struct timespec due;
    size_t len; /* 0: end of file */
    char data[];
};

/* One direction of a connection: bytes read from `from` are written to `to`. */
struct direction {
    int from, to;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    struct chunk *head, *tail;
    size_t queued;
    int writer_failed;
    struct pair *pair;
};

/* A relayed connection: both directions; the last of the four threads closes the sockets. */
struct pair {
    int client, server;
    int threads_left;
    pthread_mutex_t lock;
    struct direction way[2];
};

static void pair_release(struct pair *pair) {
    pthread_mutex_lock(&pair->lock);
    int last = --pair->threads_left == 0;
    pthread_mutex_unlock(&pair->lock);
    if (!last) return;
    close(pair->client);
    close(pair->server);
    for (int i = 0; i < 2; i++) {
        struct chunk *c = pair->way[i].head;
        while (c) {
            struct chunk *next = c->next;
            free(c);
            c = next;
        }
        pthread_mutex_destroy(&pair->way[i].lock);
        pthread_cond_destroy(&pair->way[i].changed);
    }
    pthread_mutex_destroy(&pair->lock);
    free(pair);
}

static void push(struct direction *d, struct chunk *c) {
    pthread_mutex_lock(&d->lock);
    c->next = NULL;
    if (d->tail) d->tail->next = c; else d->head = c;
    d->tail = c;
    d->queued += c->len + sizeof *c;
    pthread_cond_broadcast(&d->changed);
    pthread_mutex_unlock(&d->lock);
}

static void *reader(void *arg) {
    struct direction *d = arg;
    for (;;) {
        pthread_mutex_lock(&d->lock);
        while (d->queued >= MAX_QUEUED && !d->writer_failed) pthread_cond_wait(&d->changed, &d->lock);
        int failed = d->writer_failed;
        pthread_mutex_unlock(&d->lock);
        struct chunk *c = malloc(sizeof *c + CHUNK);
        if (!c) abort();
        ssize_t n = failed ? 0 : recv(d->from, c->data, CHUNK, 0);
        if (n < 0 && errno == EINTR) {
            free(c);
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &c->due);
        c->due.tv_nsec += delay_ns;
        while (c->due.tv_nsec >= 1000000000L) {
            c->due.tv_nsec -= 1000000000L;
            c->due.tv_sec += 1;
        }
        c->len = n > 0 ? (size_t)n : 0;
        if (c->len < CHUNK) {
            /* Small reads (a ping, a protocol message) hold only what they read. */
            struct chunk *smaller = realloc(c, sizeof *c + c->len);
            if (smaller) c = smaller;
        }
        push(d, c);
        if (n <= 0) break; /* end of file, or an error taken as one */
    }
    pair_release(d->pair);
    return NULL;
}

static void *writer(void *arg) {
    struct direction *d = arg;
    for (;;) {
        pthread_mutex_lock(&d->lock);
        while (!d->head) pthread_cond_wait(&d->changed, &d->lock);
        struct chunk *c = d->head;
        d->head = c->next;
        if (!d->head) d->tail = NULL;
        pthread_mutex_unlock(&d->lock);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &c->due, NULL) == EINTR) {}
        if (c->len == 0) {
            free(c);
            shutdown(d->to, SHUT_WR);
            break;
        }
        size_t done = 0;
        while (!d->writer_failed && done < c->len) {
            ssize_t w = send(d->to, c->data + done, c->len - done, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                /* The other side is gone: stop reading this way too (the reader sees end of file). */
                pthread_mutex_lock(&d->lock);
                d->writer_failed = 1;
                pthread_cond_broadcast(&d->changed);
                pthread_mutex_unlock(&d->lock);
                shutdown(d->from, SHUT_RD);
                break;
            }
            done += (size_t)w;
        }
        pthread_mutex_lock(&d->lock);
        d->queued -= c->len + sizeof *c;
        pthread_cond_broadcast(&d->changed);
        pthread_mutex_unlock(&d->lock);
        free(c);
    }
    pair_release(d->pair);
    return NULL;
}

static int connect_target(void) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *found, *a;
    int rc = getaddrinfo(target_host, target_port, &hints, &found);
    if (rc != 0) {
        fprintf(stderr, "delayrelay: %s:%s: %s\n", target_host, target_port, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (a = found; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(found);
    if (fd < 0) fprintf(stderr, "delayrelay: connect %s:%s: %s\n", target_host, target_port, strerror(errno));
    return fd;
}

static void start_thread(void *(*body)(void *), void *arg) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 << 10);
    if (pthread_create(&thread, &attr, body, arg) != 0) {
        perror("delayrelay: pthread_create");
        exit(1);
    }
    pthread_attr_destroy(&attr);
}

static void relay(int client) {
    int server = connect_target();
    if (server < 0) {
        close(client);
        return;
    }
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct pair *pair = calloc(1, sizeof *pair);
    if (!pair) abort();
    pair->client = client;
    pair->server = server;
    pair->threads_left = 4;
    pthread_mutex_init(&pair->lock, NULL);
    for (int i = 0; i < 2; i++) {
        struct direction *d = &pair->way[i];
        d->from = i == 0 ? client : server;
        d->to = i == 0 ? server : client;
        d->pair = pair;
        pthread_mutex_init(&d->lock, NULL);
        pthread_cond_init(&d->changed, NULL);
    }
    for (int i = 0; i < 2; i++) {
        start_thread(writer, &pair->way[i]);
        start_thread(reader, &pair->way[i]);
    }
}

static void usage(void) {
    fprintf(stderr, "usage: delayrelay [-p LISTEN_PORT] [-d DELAY_MS] TARGET_HOST:TARGET_PORT\n");
    exit(64);
}

int main(int argc, char **argv) {
    int port = 0, opt;
    while ((opt = getopt(argc, argv, "p:d:")) != -1) {
        switch (opt) {
        case 'p': port = atoi(optarg); break;
        case 'd': delay_ns = (long)(atof(optarg) * 1e6); break;
        default: usage();
        }
    }
    if (optind != argc - 1 || delay_ns < 0 || delay_ns >= 1000000000L) usage();
    char *target = strdup(argv[optind]);
    char *colon = strrchr(target, ':');
    if (!colon || colon == target || !colon[1]) usage();
    *colon = 0;
    target_host = target;
    target_port = colon + 1;
    if (target_host[0] == '[' && colon[-1] == ']') {
        colon[-1] = 0;
        target_host++;
    }
    signal(SIGPIPE, SIG_IGN);

    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (listener < 0 || bind(listener, (struct sockaddr *)&address, sizeof address) != 0 ||
        listen(listener, 128) != 0 || getsockname(listener, (struct sockaddr *)&address, &length) != 0) {
        perror("delayrelay: listen");
        return 69;
    }
    printf("%d\n", ntohs(address.sin_port));
    fflush(stdout);
    for (;;) {
        int client = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (client < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            perror("delayrelay: accept");
            if (errno == EMFILE || errno == ENFILE) {
                sleep(1);
                continue;
            }
            return 74;
        }
        relay(client);
    }
}
