/* The engine's compiled core: SystemTimer.add's finest-level path and
 * TimerTask.cancel, in C. Everything else stays in Python, and so does a pure-Python
 * version of these two (timer/engine/system_timer.py, task.py), used when this module
 * was not built or TICKWHEEL_PURE_PYTHON is set. The C versions do exactly what the
 * Python ones do, step for step, under the same lock; what they save is the bytecode.
 *
 * The module holds `add` and `cancel` as method descriptors; the classes take them in
 * their own bodies when timer/engine/core.py chooses this core. The Python classes keep
 * their state in __slots__: bind() reads each slot's offset from its member descriptor
 * once the classes exist, so a slot is read or written here with no attribute lookup.
 * Until then, and on an object of another class, both refuse to run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    Py_ssize_t task_bucket, task_cancelled;
    Py_ssize_t list_expiration;
    Py_ssize_t wheel_current, wheel_interval, wheel_tick, wheel_buckets, wheel_size;
    Py_ssize_t timer_lock, timer_checks, timer_clock, timer_wheel, timer_bound, timer_queue,
        timer_executor;
} Offsets;

static Offsets off;
static PyTypeObject *task_type = NULL;   /* TimerTask */
static PyTypeObject *list_type = NULL;   /* TimerTaskList */
static PyTypeObject *wheel_type = NULL;  /* TimingWheel */
static PyTypeObject *timer_type = NULL;  /* SystemTimer */
static PyObject *one = NULL;             /* the int 1 */
static PyObject *invalid_input = NULL;  /* timer.errors.InvalidInput */
static PyObject *s_acquire, *s_release, *s_now_ms, *s_offer, *s_submit, *s_check_room,
    *s_add_rest, *s_delay_ms;

/* dict.pop(key, None) in one call: atomic under the GIL, like the Python version's. */
static PyObject *
dict_pop(PyObject *dict, PyObject *key)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *value = NULL;
    if (PyDict_Pop(dict, key, &value) < 0) {
        return NULL;
    }
    if (value == NULL) {
        Py_RETURN_NONE;
    }
    return value;
#else
    return _PyDict_Pop(dict, key, Py_None);
#endif
}

#define SLOT(obj, o) (*(PyObject **)((char *)(obj) + (o)))

/* The value of a slot, borrowed; AttributeError if it was never set. */
static PyObject *
get_slot(PyObject *obj, Py_ssize_t o, const char *name)
{
    PyObject *v = SLOT(obj, o);
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "%s is not set on %R", name, obj);
    }
    return v;
}

/* Store a new reference in a slot (the old value is released). */
static void
set_slot(PyObject *obj, Py_ssize_t o, PyObject *value)
{
    PyObject *old = SLOT(obj, o);
    SLOT(obj, o) = value;
    Py_XDECREF(old);
}

static int
slot_offset(PyObject *cls, const char *name, Py_ssize_t *out)
{
    PyObject *descr = PyDict_GetItemString(((PyTypeObject *)cls)->tp_dict, name);
    if (descr == NULL || !PyObject_TypeCheck(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%R.%s is not a __slots__ member", cls, name);
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
    if (m->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%R.%s is not an object slot", cls, name);
        return -1;
    }
    *out = m->offset;
    return 0;
}

/* A Python int as long long; -1 with OverflowError set (or a TypeError) otherwise. */
static int
as_ll(PyObject *v, long long *out)
{
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "out of range");
        return -1;
    }
    *out = x;
    return 0;
}

static PyObject *
call0(PyObject *obj, PyObject *name)
{
    return PyObject_CallMethodNoArgs(obj, name);
}

/* The finest level, inline (see SystemTimer.add): 1 if the task went in a bucket there,
 * 0 if it does not fit there (the caller goes on in Python), -1 on error. */
static int
add_finest(PyObject *self, PyObject *task, PyObject *now_obj, PyObject *expiration_obj)
{
    long long now, expiration, current, interval, tick, size;
    PyObject *wheel = get_slot(self, off.timer_wheel, "_wheel");
    if (wheel == NULL) {
        return -1;
    }
    if (!PyObject_TypeCheck(wheel, wheel_type)) {
        return 0;
    }
    PyObject *current_o = get_slot(wheel, off.wheel_current, "current_time");
    PyObject *interval_o = get_slot(wheel, off.wheel_interval, "interval");
    PyObject *tick_o = get_slot(wheel, off.wheel_tick, "tick_ms");
    PyObject *size_o = get_slot(wheel, off.wheel_size, "wheel_size");
    PyObject *buckets = get_slot(wheel, off.wheel_buckets, "buckets");
    if (!current_o || !interval_o || !tick_o || !size_o || !buckets) {
        return -1;
    }
    if (as_ll(now_obj, &now) < 0 || as_ll(expiration_obj, &expiration) < 0 ||
        as_ll(current_o, &current) < 0 || as_ll(interval_o, &interval) < 0 ||
        as_ll(tick_o, &tick) < 0 || as_ll(size_o, &size) < 0) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            return 0;  /* huge numbers: Python's ints take it from here */
        }
        return -1;
    }
    if (!(now < expiration && expiration < current + interval &&
          expiration >= current + tick) || tick <= 0 || size <= 0 || !PyList_Check(buckets)) {
        return 0;
    }
    long long virtual_id = expiration / tick;  /* both positive here: floor division */
    Py_ssize_t index = (Py_ssize_t)(virtual_id % size);
    if (index >= PyList_GET_SIZE(buckets)) {
        return 0;
    }
    PyObject *bucket = PyList_GET_ITEM(buckets, index);
    if (!PyObject_TypeCheck(bucket, list_type)) {
        return 0;
    }
    if (PyDict_SetItem(bucket, task, expiration_obj) < 0) {
        return -1;
    }
    Py_INCREF(bucket);
    set_slot(task, off.task_bucket, bucket);
    PyObject *bound = get_slot(self, off.timer_bound, "_bound");
    if (bound == NULL) {
        return -1;
    }
    PyObject *one_more = PyNumber_Add(bound, one);
    if (one_more == NULL) {
        return -1;
    }
    set_slot(self, off.timer_bound, one_more);
    long long bucket_expiration = virtual_id * tick;
    PyObject *old = get_slot(bucket, off.list_expiration, "expiration");
    if (old == NULL) {
        return -1;
    }
    long long old_expiration;
    if (!PyLong_CheckExact(old) || as_ll(old, &old_expiration) < 0 ||
        old_expiration != bucket_expiration) {
        PyErr_Clear();
        PyObject *e = PyLong_FromLongLong(bucket_expiration);
        if (e == NULL) {
            return -1;
        }
        set_slot(bucket, off.list_expiration, e);
        PyObject *queue = get_slot(self, off.timer_queue, "_queue");
        if (queue == NULL) {
            return -1;
        }
        PyObject *r = PyObject_CallMethodOneArg(queue, s_offer, bucket);
        if (r == NULL) {
            return -1;
        }
        Py_DECREF(r);
    }
    return 1;
}

/* SystemTimer.add(task): as the Python version (see there), the finest level in C. */
static PyObject *
timer_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError, "add() takes exactly one argument (%zd given)", nargs);
        return NULL;
    }
    if (timer_type == NULL || !PyObject_TypeCheck(self, timer_type)) {
        PyErr_SetString(PyExc_TypeError, "the compiled add() runs on a bound SystemTimer only");
        return NULL;
    }
    PyObject *task = args[0];
    if (!PyObject_TypeCheck(task, task_type)) {
        PyErr_Format(invalid_input, "add() takes a TimerTask, got %s", Py_TYPE(task)->tp_name);
        return NULL;
    }
    PyObject *lock = get_slot(self, off.timer_lock, "_lock");
    if (lock == NULL) {
        return NULL;
    }
    Py_INCREF(lock);
    PyObject *r = call0(lock, s_acquire);
    if (r == NULL) {
        Py_DECREF(lock);
        return NULL;
    }
    Py_DECREF(r);
    int due = 0;  /* the task runs now (after the lock is released) */
    int failed = 0;
    PyObject *now = NULL, *expiration = NULL;
    PyObject *checks = get_slot(self, off.timer_checks, "_checks");
    if (checks == NULL) {
        failed = 1;
    }
    else if (checks == Py_True) {
        r = call0(self, s_check_room);
        if (r == NULL) {
            failed = 1;
        }
        Py_XDECREF(r);
    }
    if (!failed) {
        PyObject *old = SLOT(task, off.task_bucket);
        if (old != NULL && old != Py_None) {  /* added again: one bucket at a time */
            Py_INCREF(old);
            PyObject *popped = dict_pop(old, task);
            Py_DECREF(old);
            if (popped == NULL) {
                failed = 1;
            }
            Py_XDECREF(popped);
        }
    }
    if (!failed) {
        Py_INCREF(Py_False);
        set_slot(task, off.task_cancelled, Py_False);
        PyObject *clock = get_slot(self, off.timer_clock, "_clock");
        /* By name, not by slot: a subclass may make delay_ms a property. */
        PyObject *delay = clock ? PyObject_GetAttr(task, s_delay_ms) : NULL;
        if (clock == NULL || delay == NULL) {
            failed = 1;
        }
        else {
            now = call0(clock, s_now_ms);
            expiration = now ? PyNumber_Add(now, delay) : NULL;
            Py_DECREF(delay);
            if (expiration == NULL) {
                failed = 1;
            }
        }
    }
    if (!failed) {
        int placed = add_finest(self, task, now, expiration);
        if (placed < 0) {
            failed = 1;
        }
        else if (placed == 0) {  /* a coarser level, or due already: Python goes on */
            r = PyObject_CallMethodObjArgs(self, s_add_rest, task, now, expiration, NULL);
            if (r == NULL) {
                failed = 1;
            }
            else {
                due = PyObject_IsTrue(r);
                Py_DECREF(r);
                if (due < 0) {
                    failed = 1;
                }
            }
        }
    }
    Py_XDECREF(now);
    Py_XDECREF(expiration);
    /* The lock is released whatever happened, keeping the first error. */
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    r = call0(lock, s_release);
    Py_DECREF(lock);
    if (r == NULL) {
        if (exc_type != NULL) {  /* the first error wins; the release error is dropped */
            PyErr_Clear();
            PyErr_Restore(exc_type, exc_value, exc_tb);
        }
        return NULL;
    }
    Py_DECREF(r);
    if (exc_type != NULL) {
        PyErr_Restore(exc_type, exc_value, exc_tb);
        return NULL;
    }
    if (failed) {
        return NULL;
    }
    if (due) {
        PyObject *executor = get_slot(self, off.timer_executor, "_executor");
        if (executor == NULL) {
            return NULL;
        }
        PyObject *batch = PyTuple_Pack(1, task);
        if (batch == NULL) {
            return NULL;
        }
        Py_INCREF(executor);
        r = PyObject_CallMethodOneArg(executor, s_submit, batch);
        Py_DECREF(executor);
        Py_DECREF(batch);
        if (r == NULL) {
            return NULL;
        }
        Py_DECREF(r);
    }
    Py_RETURN_NONE;
}

/* TimerTask.cancel(): the flag first, then one atomic pop from its bucket (see there). */
static PyObject *
task_cancel(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    if (task_type == NULL || !PyObject_TypeCheck(self, task_type)) {
        PyErr_SetString(PyExc_TypeError, "the compiled cancel() runs on a bound TimerTask only");
        return NULL;
    }
    Py_INCREF(Py_True);
    set_slot(self, off.task_cancelled, Py_True);
    PyObject *bucket = SLOT(self, off.task_bucket);
    if (bucket != NULL && bucket != Py_None) {
        Py_INCREF(bucket);
        PyObject *popped = dict_pop(bucket, self);
        Py_DECREF(bucket);
        if (popped == NULL) {
            return NULL;
        }
        Py_DECREF(popped);
    }
    Py_RETURN_NONE;
}

static PyMethodDef add_def = {
    "add", (PyCFunction)(void (*)(void))timer_add, METH_FASTCALL,
    "Schedule ``task`` to run ``task.delay_ms`` from now (at once if already due)."};
static PyMethodDef cancel_def = {
    "cancel", (PyCFunction)task_cancel, METH_NOARGS,
    "Remove the task from its bucket (if any); it will never run."};

static PyObject *
bind(PyObject *module, PyObject *args)
{
    PyObject *task_cls, *list_cls, *wheel_cls, *timer_cls, *invalid;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O:bind", &PyType_Type, &task_cls, &PyType_Type,
                          &list_cls, &PyType_Type, &wheel_cls, &PyType_Type, &timer_cls,
                          &invalid)) {
        return NULL;
    }
    Offsets o;
    const struct {
        PyObject *cls;
        const char *name;
        Py_ssize_t *out;
    } slots[] = {
        {task_cls, "_bucket", &o.task_bucket},
        {task_cls, "_cancelled", &o.task_cancelled},
        {list_cls, "expiration", &o.list_expiration},
        {wheel_cls, "current_time", &o.wheel_current},
        {wheel_cls, "interval", &o.wheel_interval},
        {wheel_cls, "tick_ms", &o.wheel_tick},
        {wheel_cls, "buckets", &o.wheel_buckets},
        {wheel_cls, "wheel_size", &o.wheel_size},
        {timer_cls, "_lock", &o.timer_lock},
        {timer_cls, "_checks", &o.timer_checks},
        {timer_cls, "_clock", &o.timer_clock},
        {timer_cls, "_wheel", &o.timer_wheel},
        {timer_cls, "_bound", &o.timer_bound},
        {timer_cls, "_queue", &o.timer_queue},
        {timer_cls, "_executor", &o.timer_executor},
    };
    for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++) {
        if (slot_offset(slots[i].cls, slots[i].name, slots[i].out) < 0) {
            return NULL;
        }
    }
    if (!PyType_IsSubtype((PyTypeObject *)list_cls, &PyDict_Type)) {
        PyErr_SetString(PyExc_TypeError, "a bucket must be a dict subclass");
        return NULL;
    }
    off = o;
    Py_INCREF(task_cls);
    Py_XSETREF(task_type, (PyTypeObject *)task_cls);
    Py_INCREF(list_cls);
    Py_XSETREF(list_type, (PyTypeObject *)list_cls);
    Py_INCREF(wheel_cls);
    Py_XSETREF(wheel_type, (PyTypeObject *)wheel_cls);
    Py_INCREF(invalid);
    Py_XSETREF(invalid_input, invalid);
    Py_INCREF(timer_cls);
    Py_XSETREF(timer_type, (PyTypeObject *)timer_cls);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(TimerTask, TimerTaskList, TimingWheel, SystemTimer, InvalidInput): give add and "
     "cancel the classes' slot offsets; neither runs before."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "The engine's compiled core: SystemTimer.add and TimerTask.cancel in C.", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    s_acquire = PyUnicode_InternFromString("acquire");
    s_release = PyUnicode_InternFromString("release");
    s_now_ms = PyUnicode_InternFromString("now_ms");
    s_offer = PyUnicode_InternFromString("offer");
    s_submit = PyUnicode_InternFromString("submit");
    s_check_room = PyUnicode_InternFromString("_check_room");
    s_add_rest = PyUnicode_InternFromString("_add_rest");
    s_delay_ms = PyUnicode_InternFromString("delay_ms");
    one = PyLong_FromLong(1);
    if (!s_acquire || !s_release || !s_now_ms || !s_offer || !s_submit || !s_check_room ||
        !s_add_rest || !s_delay_ms || !one) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    /* Descriptors of `object`, so a class can take them in its body (before it exists);
     * each checks its self's class at the call. */
    PyObject *add = PyDescr_NewMethod(&PyBaseObject_Type, &add_def);
    if (add == NULL || PyModule_AddObject(module, "add", add) < 0) {
        Py_XDECREF(add);
        Py_DECREF(module);
        return NULL;
    }
    PyObject *cancel = PyDescr_NewMethod(&PyBaseObject_Type, &cancel_def);
    if (cancel == NULL || PyModule_AddObject(module, "cancel", cancel) < 0) {
        Py_XDECREF(cancel);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
