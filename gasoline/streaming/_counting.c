/*
 * gasoline.streaming._counting: the streaming tally's count of a usual console write, in C.
 *
 * count_usual() is gasoline.streaming.events.count_usual_py, with the same arguments and the
 * same answer; the Python function is the reference (read it first) and is used when this module
 * is not built (setup.py builds it as an optional extension). While every subscribed agent's
 * one-second window is full, each console write the page sends is only counted, for the agents'
 * rate_limit_exceeded notices; in Python that count was most of what ten subscribed agents cost
 * the daemon (docs/streaming.md). Here it is a pass of dict lookups.
 *
 * count_usual(entries, security, words, capped, max_message, consoles, exceptions, requests)
 *
 *   entries      a list or tuple: one console write, as stored
 *   security     whether warn entries can be events (someone wants security_violation)
 *   words        a tuple of str, one of which a message must hold for an exclude pattern to
 *                match it, or None (some exclude pattern is not literal)
 *   capped       whether exclude patterns read messages (then a message over max_message
 *                characters, or with one of the words, matters)
 *   max_message  events.MAX_MESSAGE (a longer message is searched cut, with "…" appended)
 *   consoles, exceptions, requests
 *                dicts (Counters) of counts, by URL for the error entries of type console and of
 *                type exception, by (url, status, error) for those of type network
 *
 * Returns True when the write is usual: its error entries are counted into the three dicts.
 * Returns False, and counts nothing, when anything in it is unusual: an entry that is not a
 * dict, a missing field, a type or URL other than the usual ones, a message that is not a str,
 * that could be the browser's wording of a security violation or that an exclude pattern could
 * match. The caller then classifies that write entry by entry (console_keys). False is always
 * safe: the check only decides which exact path counts the write, so it says False for
 * anything it is not sure about (a str subclass, say) where the reference may say True.
 *
 * Messages are searched one by one where the reference joins them with newlines: a word is in
 * the joined text whenever it is in one message, so the two differ only for a word with a newline
 * that spans two messages, a write the reference leaves to the exact path and this counts.
 *
 * Every value read from an entry is held (a new reference) for as long as it is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* Interned keys and values, made once at import. */
static PyObject *k_level, *k_type, *k_message, *k_url, *k_status, *k_error;
static PyObject *s_error, *s_warn, *s_console, *s_exception, *s_network, *s_csp, *s_security;

static inline Py_UCS4
ascii_lower(Py_UCS4 c)
{
    return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c;
}

/* Whether the lower-case ASCII needle occurs in s once s's ASCII letters are lowered (only
 * ASCII letters: what the reference does to the UTF-8 bytes of the messages). */
static int
has_lowered(PyObject *s, const char *needle, Py_ssize_t n)
{
    Py_ssize_t len = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *d = data;
        for (Py_ssize_t i = 0; i + n <= len; i++) {
            Py_ssize_t j = 0;
            while (j < n && ascii_lower(d[i + j]) == (Py_UCS1)needle[j])
                j++;
            if (j == n)
                return 1;
        }
        return 0;
    }
    for (Py_ssize_t i = 0; i + n <= len; i++) {
        Py_ssize_t j = 0;
        while (j < n && ascii_lower(PyUnicode_READ(kind, data, i + j)) == (Py_UCS1)needle[j])
            j++;
        if (j == n)
            return 1;
    }
    return 0;
}

/* events._may_hold_security_words, for one message. */
static int
may_hold_security_words(PyObject *s)
{
    return has_lowered(s, "content", 7) && (
        has_lowered(s, "content security policy", 23)
        || has_lowered(s, "content-security-policy", 23)
        || has_lowered(s, "mixed content", 13));
}

/* Whether the one-byte word occurs in the one-byte text (first byte, then the rest). */
static int
has_bytes(const Py_UCS1 *text, Py_ssize_t len, const Py_UCS1 *word, Py_ssize_t n)
{
    if (n == 0)
        return 1;
    if (len < n)
        return 0;
    const Py_UCS1 *p = text, *end = text + len - n + 1;
    while (p < end && (p = memchr(p, word[0], end - p)) != NULL) {
        if (memcmp(p + 1, word + 1, n - 1) == 0)
            return 1;
        p++;
    }
    return 0;
}

/* Whether a message could change the write's keys (events._messages_matter, for one
 * message): 1 yes, 0 no, -1 on an error. */
static int
message_matters(PyObject *message, PyObject *words, int capped, Py_ssize_t max_message)
{
    if (!PyUnicode_CheckExact(message))
        return 1;
    if (may_hold_security_words(message))
        return 1;
    if (!capped)
        return 0;
    if (words == Py_None)
        return 1;
    if (PyUnicode_GET_LENGTH(message) > max_message)
        return 1;
    int kind = PyUnicode_KIND(message);
    Py_ssize_t nwords = PyTuple_GET_SIZE(words);
    for (Py_ssize_t i = 0; i < nwords; i++) {
        PyObject *word = PyTuple_GET_ITEM(words, i);
        if (kind == PyUnicode_1BYTE_KIND) {
            /* A word with a wider character is in no one-byte string. */
            if (PyUnicode_KIND(word) == PyUnicode_1BYTE_KIND
                && has_bytes(PyUnicode_1BYTE_DATA(message), PyUnicode_GET_LENGTH(message),
                             PyUnicode_1BYTE_DATA(word), PyUnicode_GET_LENGTH(word)))
                return 1;
            continue;
        }
        Py_ssize_t at = PyUnicode_Find(message, word, 0, PY_SSIZE_T_MAX, 1);
        if (at == -2)
            return -1;
        if (at >= 0)
            return 1;
    }
    return 0;
}

/* counts[key] += 1 */
static int
bump(PyObject *counts, PyObject *key)
{
    PyObject *n = PyDict_GetItemWithError(counts, key);
    PyObject *more;
    if (n != NULL) {
        Py_ssize_t was = PyLong_AsSsize_t(n);
        if (was == -1 && PyErr_Occurred())
            return -1;
        more = PyLong_FromSsize_t(was + 1);
    } else if (PyErr_Occurred()) {
        return -1;
    } else {
        more = PyLong_FromLong(1);
    }
    if (more == NULL)
        return -1;
    int r = PyDict_SetItem(counts, key, more);
    Py_DECREF(more);
    return r;
}

/* entry[key] as a new reference; NULL with no error set when the key is missing. */
static inline PyObject *
field(PyObject *entry, PyObject *key)
{
    PyObject *value = PyDict_GetItemWithError(entry, key);
    Py_XINCREF(value);
    return value;
}

/* Whether v is one of the exact str values, or a str subclass (unusual): 1, 0, or 2 (subclass). */
static int
is_exact(PyObject *v, PyObject *s)
{
    if (!PyUnicode_CheckExact(v))
        return PyUnicode_Check(v) ? 2 : 0;
    return v == s || PyUnicode_Compare(v, s) == 0;
}

enum { USUAL = 1, UNUSUAL = 0, FAILED = -1 };

/* Look at one error entry: on USUAL, *target and *key (a new reference) say what to count. */
static int
error_entry(PyObject *entry, PyObject *words, int capped, Py_ssize_t max_message,
            PyObject *consoles, PyObject *exceptions, PyObject *requests,
            PyObject **target, PyObject **key)
{
    int verdict = UNUSUAL;
    PyObject *kind = NULL, *message = NULL, *url = NULL, *status = NULL, *error = NULL;
    if ((kind = field(entry, k_type)) == NULL || (message = field(entry, k_message)) == NULL)
        goto done;
    int m = message_matters(message, words, capped, max_message);
    if (m != 0) {
        verdict = m < 0 ? FAILED : UNUSUAL;
        goto done;
    }
    if (!PyUnicode_CheckExact(kind))
        goto done;
    if ((url = field(entry, k_url)) == NULL)
        goto done;
    if (!PyUnicode_CheckExact(url) || PyUnicode_GET_LENGTH(url) == 0)
        goto done;
    if (PyUnicode_Compare(kind, s_console) == 0) {
        *target = consoles;
    } else if (PyUnicode_Compare(kind, s_exception) == 0) {
        *target = exceptions;
    } else if (PyUnicode_Compare(kind, s_network) == 0) {
        *target = requests;
    } else {
        goto done;
    }
    if (*target != requests) {
        Py_INCREF(url);
        *key = url;
        verdict = USUAL;
        goto done;
    }
    /* A failed request: counted by (url, status, error); a status of True is not the status 1. */
    status = field(entry, k_status);
    if (status == NULL && PyErr_Occurred())
        goto failed;
    if (status != NULL && PyBool_Check(status))
        goto done;
    error = field(entry, k_error);
    if (error == NULL && PyErr_Occurred())
        goto failed;
    *key = PyTuple_Pack(3, url, status ? status : Py_None, error ? error : Py_None);
    if (*key == NULL)
        goto failed;
    if (PyObject_Hash(*key) == -1) {  /* an unhashable status or error: unusual */
        Py_CLEAR(*key);
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            goto failed;
        PyErr_Clear();
        goto done;
    }
    verdict = USUAL;
    goto done;
failed:
    verdict = FAILED;
done:
    if (verdict == UNUSUAL && PyErr_Occurred())
        verdict = FAILED;
    Py_XDECREF(kind);
    Py_XDECREF(message);
    Py_XDECREF(url);
    Py_XDECREF(status);
    Py_XDECREF(error);
    return verdict;
}

/* Look at one warn entry (when security violations are wanted): USUAL unless its type is a
 * security one or its message matters. */
static int
warn_entry(PyObject *entry, PyObject *words, int capped, Py_ssize_t max_message)
{
    int verdict = UNUSUAL;
    PyObject *kind = NULL, *message = NULL;
    if ((kind = field(entry, k_type)) == NULL)
        goto done;
    int security = is_exact(kind, s_csp);
    if (security == 0)
        security = is_exact(kind, s_security);
    if (security != 0)
        goto done;
    if ((message = field(entry, k_message)) == NULL)
        goto done;
    int m = message_matters(message, words, capped, max_message);
    verdict = m < 0 ? FAILED : m ? UNUSUAL : USUAL;
done:
    if (verdict == UNUSUAL && PyErr_Occurred())
        verdict = FAILED;
    Py_XDECREF(kind);
    Py_XDECREF(message);
    return verdict;
}

static PyObject *
count_usual(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "count_usual() takes 8 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *words = args[2], *consoles = args[5], *exceptions = args[6], *requests = args[7];
    if (words != Py_None && !PyTuple_CheckExact(words)) {
        PyErr_SetString(PyExc_TypeError, "words must be a tuple or None");
        return NULL;
    }
    for (Py_ssize_t i = 0; words != Py_None && i < PyTuple_GET_SIZE(words); i++) {
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(words, i))) {
            PyErr_SetString(PyExc_TypeError, "words must be str");
            return NULL;
        }
    }
    if (!PyDict_Check(consoles) || !PyDict_Check(exceptions) || !PyDict_Check(requests)) {
        PyErr_SetString(PyExc_TypeError, "the counts must be dicts");
        return NULL;
    }
    int security = PyObject_IsTrue(args[1]);
    int capped = PyObject_IsTrue(args[3]);
    Py_ssize_t max_message = PyLong_AsSsize_t(args[4]);
    if (security < 0 || capped < 0 || (max_message == -1 && PyErr_Occurred()))
        return NULL;
    /* A tuple (the store publishes one; a list is copied): nothing the loop calls can resize
     * it under it. */
    if (!PyList_Check(args[0]) && !PyTuple_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "entries must be a list or a tuple");
        return NULL;
    }
    PyObject *seq = PySequence_Tuple(args[0]);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject **items = &PyTuple_GET_ITEM(seq, 0);
    /* What to count once the whole write is known to be usual: (dict, key) per error entry. */
    PyObject **targets = PyMem_New(PyObject *, n ? n : 1);
    PyObject **keys = PyMem_New(PyObject *, n ? n : 1);
    Py_ssize_t found = 0;
    int verdict = USUAL;
    if (targets == NULL || keys == NULL) {
        PyErr_NoMemory();
        verdict = FAILED;
    }
    for (Py_ssize_t i = 0; i < n && verdict == USUAL; i++) {
        PyObject *entry = items[i];
        if (!PyDict_CheckExact(entry)) {
            verdict = UNUSUAL;
            break;
        }
        PyObject *level = field(entry, k_level);
        if (level == NULL) {
            verdict = PyErr_Occurred() ? FAILED : UNUSUAL;
            break;
        }
        int error = is_exact(level, s_error);
        int warn = error == 0 && security ? is_exact(level, s_warn) : 0;
        Py_DECREF(level);
        if (error == 2 || warn == 2) {  /* a str subclass: leave it to the reference */
            verdict = UNUSUAL;
        } else if (error) {
            PyObject *target = NULL, *key = NULL;
            verdict = error_entry(entry, words, capped, max_message, consoles, exceptions,
                                  requests, &target, &key);
            if (verdict == USUAL) {
                targets[found] = target;
                keys[found++] = key;
            }
        } else if (warn) {
            verdict = warn_entry(entry, words, capped, max_message);
        }
    }
    for (Py_ssize_t i = 0; i < found && verdict == USUAL; i++) {
        if (bump(targets[i], keys[i]) < 0)
            verdict = FAILED;
    }
    for (Py_ssize_t i = 0; i < found; i++)
        Py_DECREF(keys[i]);
    PyMem_Free(targets);
    PyMem_Free(keys);
    Py_DECREF(seq);
    if (verdict == FAILED)
        return NULL;
    return PyBool_FromLong(verdict == USUAL);
}

static PyMethodDef methods[] = {
    {"count_usual", (PyCFunction)(void (*)(void))count_usual, METH_FASTCALL,
     "count_usual(entries, security, words, capped, max_message, consoles, exceptions, "
     "requests) -> bool\n\nCount a usual console write's error entries (see "
     "gasoline.streaming.events.count_usual_py, the reference)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef counting_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gasoline.streaming._counting",
    .m_doc = "The streaming tally's count of a usual console write, in C "
             "(gasoline.streaming.events.count_usual_py is the reference).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__counting(void)
{
#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return NULL
    INTERN(k_level, "level");
    INTERN(k_type, "type");
    INTERN(k_message, "message");
    INTERN(k_url, "url");
    INTERN(k_status, "status");
    INTERN(k_error, "error");
    INTERN(s_error, "error");
    INTERN(s_warn, "warn");
    INTERN(s_console, "console");
    INTERN(s_exception, "exception");
    INTERN(s_network, "network");
    INTERN(s_csp, "csp_violation");
    INTERN(s_security, "security");
#undef INTERN
    return PyModule_Create(&counting_module);
}
