/*
 * The two XML documents an S3 client reads, with a small strict reader
 * (no DTDs, no external anything): a ListObjectsV2 page
 * (ListBucketResult: Contents/Key, Size, ETag; IsTruncated,
 * NextContinuationToken) and an error (Error: Code, Message).
 *
 * Strict: one root element, tags balanced and well formed, the five
 * predefined entities and numeric character references (decoded to
 * UTF-8), comments and the XML declaration skipped, CDATA taken as text,
 * anything else (DOCTYPE, processing instructions inside) refused.
 * Elements the documents do not define are skipped whatever they hold.
 * Keys are at most S3XML_KEY_MAX bytes (S3's own limit is 1024).
 */
#ifndef PRESTO_S3XML_H
#define PRESTO_S3XML_H

#include <stddef.h>
#include <stdint.h>

#define S3XML_KEY_MAX 1024
#define S3XML_ETAG_MAX 80
#define S3XML_TOKEN_MAX 4096

struct s3xml_object {
    char *key;                 /* malloc'ed */
    uint64_t size;
    char etag[S3XML_ETAG_MAX]; /* as sent, quotes removed */
};

struct s3xml_page {
    struct s3xml_object *objects; /* malloc'ed */
    size_t n;
    int truncated;                /* IsTruncated: more pages follow */
    char next_token[S3XML_TOKEN_MAX + 1];
};

/* Parses a ListBucketResult. Returns 0, -EBADMSG (not one, or malformed:
 * message in err), or -ENOMEM. The page must be freed with
 * s3xml_page_free, also after an error. */
int s3xml_list(const char *xml, size_t len, struct s3xml_page *page, char *err,
               size_t errlen);
void s3xml_page_free(struct s3xml_page *page);
/* Frees n objects' keys and the array. */
void s3xml_objects_free(struct s3xml_object *objects, size_t n);

/* Reads an S3 Error document's Code and Message (each cut to its buffer;
 * "" when absent). Returns 0, or -EBADMSG when xml is not one. */
int s3xml_error(const char *xml, size_t len, char *code, size_t codelen, char *message,
                size_t messagelen);

#endif
