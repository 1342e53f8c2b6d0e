/*
 * The C side of tests/tools/objfixture.py, for test programs: start an S3
 * (s3rver behind the signature-checking, delaying, failing proxy) or HTTP
 * (nginx) fixture, send it commands, stop it. Header-only (static
 * functions): unit and integration tests include it.
 *
 *   struct objfixture fx;
 *   int rc = objfixture_start(&fx, "s3 --bucket b=/tmp/d --secret s");
 *   if (rc == 77) skip; ...  fx.port is the port to talk to
 *   objfixture_cmd(&fx, "delay 20", NULL, 0);
 *   objfixture_stop(&fx);
 *
 * The fixture runs as $PYTHON (default /usr/bin/python3) on
 * $PRESTO_SRC/tests/tools/objfixture.py, with s3rver from
 * $PRESTO_S3RVER or $PRESTO_SRC/build/s3rver.
 */
#ifndef PRESTO_TEST_OBJFIXTURE_H
#define PRESTO_TEST_OBJFIXTURE_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

struct objfixture {
    pid_t pid;
    FILE *in, *out; /* its stdin, its stdout */
    int port, s3rver_port;
    char why[512];  /* why it did not start */
};

/* Starts `objfixture.py ARGS` (ARGS shell-quoted as needed). Returns 0,
 * 77 when the fixture cannot be had (why says so), or -1. */
static int objfixture_start(struct objfixture *fx, const char *args)
{
    const char *py = getenv("PYTHON"), *src = getenv("PRESTO_SRC"), *s3r = getenv("PRESTO_S3RVER");
    char s3rdir[1024], cmd[16384];
    py = py && *py ? py : "/usr/bin/python3";
    src = src && *src ? src : ".";
    if (s3r && *s3r)
        snprintf(s3rdir, sizeof(s3rdir), "%s", s3r);
    else
        snprintf(s3rdir, sizeof(s3rdir), "%s/build/s3rver", src);
    int s3 = strncmp(args, "s3", 2) == 0;
    snprintf(cmd, sizeof(cmd), "exec '%s' '%s/tests/tools/objfixture.py' %s%s%s%s 2>&2", py, src,
             args, s3 ? " --s3rver '" : "", s3 ? s3rdir : "", s3 ? "'" : "");
    memset(fx, 0, sizeof(*fx));
    int to[2], from[2];
    if (pipe(to) < 0 || pipe(from) < 0)
        return -1;
    fx->pid = fork();
    if (fx->pid < 0)
        return -1;
    if (fx->pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[0]), close(to[1]), close(from[0]), close(from[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    fx->in = fdopen(to[1], "w");
    fx->out = fdopen(from[0], "r");
    char line[4096];
    if (fgets(line, sizeof(line), fx->out) == NULL || strncmp(line, "READY ", 6) != 0) {
        int st = 0;
        fclose(fx->in);
        fclose(fx->out);
        waitpid(fx->pid, &st, 0);
        fx->pid = 0;
        snprintf(fx->why, sizeof(fx->why), "objfixture %s did not start (exit %d)", args,
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return WIFEXITED(st) && WEXITSTATUS(st) == 77 ? 77 : -1;
    }
    const char *p = strstr(line, "\"port\": ");
    fx->port = p ? atoi(p + 8) : 0;
    p = strstr(line, "\"s3rver_port\": ");
    fx->s3rver_port = p ? atoi(p + 15) : 0;
    return fx->port > 0 ? 0 : -1;
}

/* Sends one command; its answer line goes to reply (when not NULL).
 * Returns 0 when the answer is not an error. */
static int objfixture_cmd(struct objfixture *fx, const char *cmd, char *reply, size_t len)
{
    char line[4096];
    if (fx->pid <= 0 || fprintf(fx->in, "%s\n", cmd) < 0 || fflush(fx->in) != 0 ||
        fgets(line, sizeof(line), fx->out) == NULL)
        return -1;
    line[strcspn(line, "\n")] = '\0';
    if (reply)
        snprintf(reply, len, "%s", line);
    return strncmp(line, "ERR", 3) == 0 ? -1 : 0;
}

/* A number from the fixture's stats ("requests", "denied", ...), or -1. */
static long objfixture_stat(struct objfixture *fx, const char *name)
{
    char reply[4096], key[128];
    if (objfixture_cmd(fx, "stats", reply, sizeof(reply)) < 0)
        return -1;
    snprintf(key, sizeof(key), "\"%s\": ", name);
    const char *p = strstr(reply, key);
    return p ? atol(p + strlen(key)) : -1;
}

static void objfixture_stop(struct objfixture *fx)
{
    if (fx->pid <= 0)
        return;
    fprintf(fx->in, "quit\n");
    fclose(fx->in);
    fclose(fx->out);
    int st;
    waitpid(fx->pid, &st, 0);
    fx->pid = 0;
}

#endif
