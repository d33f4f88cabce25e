/* The compiled DTR engine: the same semantics as pyengine.py, on flat arrays and bitsets.
 *
 * It owns speed only; pyengine.py owns meaning, and tests hold the two in lockstep.
 * Every tie is explicit: the pool is scanned in insertion order and the last candidate whose
 * score is <= the best wins, a score of exactly 0 stops the scan, and scores are correctly
 * rounded quotients of integers (as Python's int / int is).
 * A policy arrives as a formula (formula.py) compiled to a flat postfix program, interpreted in
 * score() with the arithmetic of Python's numbers: exact integers (128 bits here; past that the
 * run stops with OUT_OVERFLOW and dtrlab takes the exact Python path), IEEE doubles otherwise.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;
typedef int32_t i32;
typedef uint64_t u64;
typedef unsigned __int128 u128;
typedef __int128 i128;

#define LA_NONE INT64_MIN /* a storage never used as an input: staleness is infinite */

/* ---- correctly rounded quotients ------------------------------------------------------ */

static int bitlen128(u128 x) {
    u64 hi = (u64)(x >> 64), lo = (u64)x;
    if (hi) return 128 - __builtin_clzll(hi);
    if (lo) return 64 - __builtin_clzll(lo);
    return 0;
}

/* a / b rounded to nearest double, ties to even; a > 0, 0 < b < 2**127 (so r << 1 never
 * overflows). Pure integer long division. */
static double exact_div(u128 a, u128 b) {
    u128 ip = (u128)a / b, r = (u128)a % b;
    u64 q;       /* 55 significant bits of the quotient */
    int exp2;    /* value = q * 2^exp2 (before rounding) */
    if (ip) {
        int n = bitlen128(ip);
        if (n >= 55) {
            int drop = n - 55;
            u128 lost = ip & ((((u128)1) << drop) - 1);
            q = (u64)(ip >> drop);
            if (lost) r |= 1; /* sticky */
            exp2 = drop;
        } else {
            q = (u64)ip;
            exp2 = 0;
            for (int i = n; i < 55; i++) {
                r <<= 1;
                q <<= 1;
                if (r >= b) { r -= b; q |= 1; }
                exp2--;
            }
        }
    } else {
        /* skip the leading zero bits of the fraction: shift r up to b's magnitude */
        int shift = bitlen128(b) - bitlen128(r);
        r <<= shift;
        exp2 = -shift;
        if (r < b) { r <<= 1; exp2--; }
        /* now b <= r < 2b: the first quotient bit is 1 */
        r -= b;
        q = 1;
        for (int i = 1; i < 55; i++) {
            r <<= 1;
            q <<= 1;
            if (r >= b) { r -= b; q |= 1; }
        }
        exp2 -= 54;
    }
    int sticky = r != 0;
    u64 mant = q >> 2;
    unsigned low = (unsigned)(q & 3);
    if (low == 3 || (low == 2 && (sticky || (mant & 1)))) mant++;
    return ldexp((double)mant, exp2 + 2);
}

/* num / den correctly rounded, as Python's int / int; den > 0. */
static double quotient(i128 num, i128 den) {
    if (num == 0) return 0.0;
    int neg = num < 0;
    u128 a = neg ? (u128)0 - (u128)num : (u128)num, b = (u128)den;
    double q;
    const u128 exact = ((u128)1) << 53;
    if (a <= exact && b <= exact) {
        q = (double)(u64)a / (double)(u64)b; /* both exact: IEEE division rounds correctly */
    }
#if defined(__x86_64__) && LDBL_MANT_DIG == 64
    else if ((a >> 64) == 0 && (b >> 64) == 0) {
        /* 64-bit quotient, then to 53 bits: safe unless it lands on a midpoint of doubles */
        long double ql = (long double)(u64)a / (long double)(u64)b;
        u64 m;
        memcpy(&m, &ql, sizeof m); /* x87 extended: the explicit 64-bit significand */
        if ((m & 0x7FF) == 0x400) q = exact_div(a, b);
        else q = (double)ql;
    }
#endif
    else {
        q = exact_div(a, b);
    }
    return neg ? -q : q;
}

/* ---- values of the score language -------------------------------------------------------
 * A value is an exact integer or a double, as a Python number is; every operation follows
 * Python's rules for int and float (formula.py is the definition). */

typedef struct {
    i128 i;
    double d;
    int f; /* 1: the value is the double d; 0: the integer i */
} Val;

#define I128_MAX ((i128)(((u128)1 << 127) - 1))
#define I128_MIN (-I128_MAX - 1)

static inline Val vint(i128 i) { Val v; v.i = i; v.d = 0; v.f = 0; return v; }
static inline Val vdbl(double d) { Val v; v.i = 0; v.d = d; v.f = 1; return v; }
/* Python's float(int): correctly rounded */
static inline double as_dbl(Val v) { return v.f ? v.d : quotient(v.i, 1); }

/* The sign of x - d for a double d that is not NaN, exactly (Python compares int and float
 * exactly, not by converting the int). */
static int cmp_int_dbl(i128 x, double d) {
    const double two127 = 170141183460469231731687303715884105728.0;
    if (d >= two127) return -1;
    if (d < -two127) return 1;
    double fl = floor(d);
    i128 fi = (i128)fl;
    if (x != fi) return x < fi ? -1 : 1;
    return d > fl ? -1 : 0;
}

/* a < b and a <= b, with Python's results (false whenever a NaN is involved) */
static int val_lt(Val a, Val b) {
    if (a.f && b.f) return a.d < b.d;
    if (!a.f && !b.f) return a.i < b.i;
    if (a.f) return a.d == a.d && cmp_int_dbl(b.i, a.d) > 0;
    return b.d == b.d && cmp_int_dbl(a.i, b.d) < 0;
}

static int val_le(Val a, Val b) {
    if (a.f && b.f) return a.d <= b.d;
    if (!a.f && !b.f) return a.i <= b.i;
    if (a.f) return a.d == a.d && cmp_int_dbl(b.i, a.d) >= 0;
    return b.d == b.d && cmp_int_dbl(a.i, b.d) <= 0;
}

static inline int val_zero(Val v) { return v.f ? v.d == 0 : v.i == 0; }
static inline int val_gt0(Val v) { return v.f ? v.d > 0 : v.i > 0; }

/* The opcodes of the postfix program and the features it reads, exported to Python by name
 * (cengine.py checks at import that formula.py has the same names). */
enum { OP_FEATURE = 0, OP_INT, OP_FLOAT, OP_NEG, OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_MIN, OP_MAX,
       OP_LOG, N_OPCODES };
static const char *OPCODE_NAMES[N_OPCODES] = {"feature", "int", "float", "neg", "add", "sub", "mul",
                                              "div", "pow", "min", "max", "log"};
enum { F_COMPUTE = 0, F_SIZE, F_STALENESS, F_ESTAR, F_ANCESTORS, F_EQCLASS, F_FRESH_ESTAR,
       F_FRESH_STALENESS, F_LAST_ACCESS, F_CLOCK, F_EVICTIONS, F_REMATS, F_BUDGET, F_RESIDENT, N_FEATURES };
static const char *FEATURE_NAMES[N_FEATURES] = {"compute", "size", "staleness", "estar", "ancestors",
                                                "eqclass", "fresh_estar", "fresh_staleness", "last_access",
                                                "clock", "evictions", "remats", "budget", "resident"};
#define MAX_STACK 128

typedef struct {
    i64 op, arg;
} Op;

/* Run a postfix program over feature values; sets *overflow when an integer leaves 128 bits.
 * The caller has checked the program (cengine.py builds it; depth <= MAX_STACK). */
static Val run_program(const Op *code, i32 n, const double *floats, const Val *fv, int *overflow) {
    Val st[MAX_STACK];
    int top = 0;
    for (i32 k = 0; k < n; k++) {
        const Op *o = &code[k];
        switch (o->op) {
        case OP_FEATURE: st[top++] = fv[o->arg]; continue;
        case OP_INT: st[top++] = vint(o->arg); continue;
        case OP_FLOAT: st[top++] = vdbl(floats[o->arg]); continue;
        case OP_NEG: {
            Val *a = &st[top - 1];
            if (a->f) a->d = -a->d;
            else if (a->i == I128_MIN) *overflow = 1;
            else a->i = -a->i;
            continue;
        }
        case OP_LOG: {
            Val *a = &st[top - 1];
            *a = vdbl(val_gt0(*a) ? log(as_dbl(*a)) : val_zero(*a) ? -INFINITY : NAN);
            continue;
        }
        case OP_POW: {
            Val *a = &st[top - 1];
            if (a->f) { a->d = pow(a->d, (double)o->arg); continue; }
            i128 r = 1;
            for (i64 e = 0; e < o->arg; e++)
                if (__builtin_mul_overflow(r, a->i, &r)) *overflow = 1;
            a->i = r;
            continue;
        }
        default: break;
        }
        Val b = st[--top], *a = &st[top - 1];
        switch (o->op) {
        case OP_ADD:
            if (!a->f && !b.f) { if (__builtin_add_overflow(a->i, b.i, &a->i)) *overflow = 1; }
            else *a = vdbl(as_dbl(*a) + as_dbl(b));
            break;
        case OP_SUB:
            if (!a->f && !b.f) { if (__builtin_sub_overflow(a->i, b.i, &a->i)) *overflow = 1; }
            else *a = vdbl(as_dbl(*a) - as_dbl(b));
            break;
        case OP_MUL:
            if (!a->f && !b.f) {
                if (a->i == (i64)a->i && b.i == (i64)b.i) a->i = (i128)(i64)a->i * (i64)b.i; /* fits */
                else if (__builtin_mul_overflow(a->i, b.i, &a->i)) *overflow = 1;
            }
            else *a = vdbl(as_dbl(*a) * as_dbl(b));
            break;
        case OP_DIV: /* the reference's quotient: inf when the denominator is not > 0 */
            if (!val_gt0(b)) *a = vdbl(INFINITY);
            else if (!a->f && !b.f) *a = vdbl(quotient(a->i, b.i));
            else *a = vdbl(as_dbl(*a) / as_dbl(b));
            break;
        case OP_MIN: if (val_lt(b, *a)) *a = b; break; /* Python's min(a, b): b only if b < a */
        case OP_MAX: if (val_lt(*a, b)) *a = b; break;
        }
    }
    return st[0];
}

/* Whether score_i64 can run this program. */
static int integer_shape(const Op *code, i32 n) {
    for (i32 k = 0; k < n; k++) {
        i64 op = code[k].op;
        if (op == OP_FLOAT || op == OP_LOG || (op == OP_DIV && k != n - 1)) return 0;
    }
    return 1;
}

/* ---- the program (borrowed buffers) ---------------------------------------------------- */

typedef struct {
    i32 n_ops, n_tensors, n_storages, n_steps;
    const i64 *op_cost, *op_size;
    const i32 *op_out_start, *op_n_out, *op_arg_ptr, *op_args;
    const i32 *t_op, *t_storage;
    const i64 *t_size;
    const i64 *s_size;
    const i32 *s_tptr, *s_tensors; /* storage -> its tensors, ascending ids */
    /* storage -> distinct adjacent storages (forward: consumers; reverse: inputs of its
     * producers), each with the operator whose creation adds the edge, ascending */
    const i32 *f_ptr, *f_list, *f_birth, *r_ptr, *r_list, *r_birth;
    const signed char *step_kind;
    const i32 *step_target;
    const signed char *s_const; /* per storage: its root tensor's operator is a constant */
} Prog;

/* ---- state ------------------------------------------------------------------------------ */

/* Outcomes (the first three are a run's; exported by name) and schedule step kinds (lower.py's
 * numbers, checked by cengine.py at import). */
enum { OUT_OK = 0, OUT_OOM = 1, OUT_REMAT = 2, OUT_NOMEM = 3, OUT_STALE = 4, OUT_OVERFLOW = 5, OUT_PYERR = 6,
       OUT_INTERRUPTED = 7 };
enum { STEP_COMPUTE = 0, STEP_GET = 1, STEP_PIN = 2, STEP_RELEASE = 3 };

typedef struct {
    u64 *interior, *frontier;
} Bits;

/* ---- instruments: the event log and the OOM snapshot (instruments.py owns their meaning) ----
 * Event kinds, the log's int64 columns and the OOM reasons, exported by name and checked by
 * cengine.py at import against instruments.py's tables. */
enum { EV_COMPUTE = 0, EV_REMAT, EV_EVICT, EV_EVICT_EAGER, EV_LOCK, N_EVENT_KINDS };
static const char *EVENT_KIND_NAMES[N_EVENT_KINDS] = {"compute", "remat", "evict", "evict_eager", "lock"};
enum { C_CLOCK = 0, C_STORAGE, C_TENSOR, C_DEPTH, C_MEMORY, C_PINNED, C_LOCKED, C_POOL, N_INT_COLS };
static const char *INT_COLUMN_NAMES[N_INT_COLS] = {"clock_ns", "storage", "tensor", "depth", "memory_bytes",
                                                   "pinned_bytes", "locked_bytes", "pool_size"};
enum { R_PINNED_CONSTANT = 0, R_PINNED_OUTPUT, R_LOCKED, R_EVICTABLE, R_OUTSIDE_POOL, N_OOM_REASONS };
static const char *OOM_REASON_NAMES[N_OOM_REASONS] = {"pinned constant", "pinned output", "locked", "evictable",
                                                      "outside pool"};
/* A storage's share of the byte columns: neither, resident on a locked unpinned storage, pinned */
enum { SHARE_FREE = 0, SHARE_LOCKED, SHARE_PINNED };

/* A region's set of storages: the bits of words [lo, lo + n) only, so that its cost follows the
 * region, not the trace (a full row per storage grew as the square of the trace). */
typedef struct {
    u64 *w;
    i32 lo, n, cap;
} Row;

/* Growable columns, one row per event; rows are appended only when the log was asked for. */
typedef struct {
    signed char *kind;
    i64 *ints[N_INT_COLS];
    double *score, *terms; /* terms: n_terms per row */
    i64 n, cap;
    int n_terms;
} EvLog;

typedef struct {
    const Prog *p;
    /* options */
    i64 budget; /* < 0: unbounded */
    int random, eager, regions_on, eq_on;
    const Op *code; /* the score's postfix program (unused when random) */
    i32 code_n;
    const double *floats;
    i32 feat_list[N_FEATURES], feat_n; /* the features the program reads */
    int integer_shape;                 /* score_i64 may run it */
    /* the shape (a + b + ...) / (c * d * ...) of features and integers, when the program has it */
    int quot_shape, num_n, den_n;      /* den_n 0: no division */
    const Op *num_terms[MAX_STACK], *den_terms[MAX_STACK];
    int overflow;                      /* an integer of the score left 128 bits */
    double remat_limit;
    u64 rng;
    /* tensors */
    unsigned char *defined;
    i32 ops_created; /* operators (hence graph edges) that exist so far */
    /* storages */
    unsigned char *material, *pinned, *in_pool;
    i32 *ref_int;
    i64 *ref_ext, *s_compute, *last_access;
    i32 *s_live; /* tensors created so far */
    i32 *pool_prev, *pool_next;
    i32 pool_head, pool_tail, pool_n;
    i32 *pool_arr, *pool_pos; /* the pool as a dense array (removal swaps in the last), for samples */
    i64 pool_bytes;
    /* the eviction search's shortcuts (runtime options): score a sample of ceil(sqrt(pool)) drawn
     * from pool_arr; leave out storages below small_percent % of the pool's mean size */
    int sample, small_percent;
    /* e* regions: a set (interior, frontier) per storage and direction */
    int words; /* of a bitset over every storage (pending) */
    Row *fwd_in, *fwd_fr, *rev_in, *rev_fr;
    i64 *fwd_c, *rev_c;
    /* trusted reverse regions (see "Trusted reverse regions" below) */
    int trust_on, check;
    i32 stale;               /* check: 1 + the storage whose region or count was found wrong */
    const char *stale_what;  /* check: which ("forward region", "reverse frontier count", ...) */
    Row check_in, check_fr; /* check: scratch sets */
    unsigned char *rev_ok; /* the stored reverse region equals a fresh traversal now */
    unsigned char *fwd_ok; /* the same for forward regions, up to the newest operator's edges */
    i32 *fwd_ops;          /* per storage: ops_created when its forward region last saw every edge */
    int window;            /* the newest operator is created and not yet computed */
    Row aff; /* scratch: a union of frontiers */
    i32 *aff_list, *aff_rev_list, *touched;
    u64 *lab, *delta; /* per storage: the bases of a group that reach it, not yet expanded */
    u64 *pending;     /* storages waiting to be expanded (a bitset) */
    i32 *dfs;
    /* per-operator scratch, as long as the widest operator's outputs (no limit on outputs) */
    i32 *op_rs;
    unsigned char *op_dup, *op_leaf, *op_gone;
    /* equivalence classes */
    i32 *ecn; /* a node, or ECN_UNMADE / ECN_CLEARED (see create and compute) */
    i32 *uf_parent;
    i64 *uf_value;
    i32 uf_n, uf_cap;
    /* scratch marks */
    i32 *mark, *mark2, *umark;
    i32 stamp;
    i32 *node_mark;
    i32 node_mark_cap;
    /* rematerialization stack */
    i32 *fr_t, *fr_undef_off, *fr_undef_n, *fr_i;
    unsigned char *fr_remat, *fr_wait;
    i32 fr_n, fr_cap;
    i32 *undef;
    i32 undef_n, undef_cap;
    /* counters */
    i64 clock, memory, peak, remat_ns;
    i64 evictions, eager_evictions, distinct, evals;
    i64 region_rebuilds, region_updates; /* regions traversed afresh / trusted ones updated */
    i64 region_transfers;                /* of those updates: forward regions handed on (region_transfer) */
    i64 region_edges;      /* edges walked by those traversals */
    unsigned char *evicted_by_policy;
    /* optional instruments */
    i64 *cnt_policy, *cnt_eager, *cnt_remat;
    i64 *hist_evict, *hist_remat; /* the history features (per storage), when the score reads them */
    int ev_on;              /* the event log is wanted */
    EvLog ev;
    unsigned char *share;   /* per storage: SHARE_* */
    i64 share_bytes[3];     /* resident bytes by share */
    int have_choice;        /* a policy choice's score and terms wait for its eviction's row */
    double choice_score, choice_terms[N_FEATURES];
    int nomem;
    /* a followed source (the Follower type): its executor, told what to run and what to drop */
    PyObject *ex;  /* NULL on a trace */
    PyObject *ex_compute, *ex_drop; /* its bound methods */
    int pyerr;     /* the executor raised: its exception is set */
    i64 need;      /* the bytes an OOM could not make room for */
    /* progress: every tick_every units of work (a schedule step, a computation, a policy
     * eviction) the run calls progress(clock_ns, remat_ns, evictions, eager_evictions,
     * ops_created, step) with the GIL; without a callback tick_left never reaches 0, so the hot
     * loop pays one decrement. The callback raising (Ctrl-C) ends the run: OUT_INTERRUPTED. */
    PyObject *progress;
    i64 tick_every, tick_left;
    i32 step_now;
    PyThreadState *tstate; /* the GIL released by py_run */
    PyObject *interrupt;   /* what the callback raised (its exception value) */
} St;

static inline i32 st_of(const St *S, i32 t) { return S->p->t_storage[t]; }

/* ---- pool: insertion-ordered, O(1) removal ------------------------------------------------ */

static void pool_add(St *S, i32 s) {
    if (S->in_pool[s]) return;
    S->in_pool[s] = 1;
    S->pool_prev[s] = S->pool_tail;
    S->pool_next[s] = -1;
    if (S->pool_tail >= 0) S->pool_next[S->pool_tail] = s;
    else S->pool_head = s;
    S->pool_tail = s;
    S->pool_pos[s] = S->pool_n;
    S->pool_arr[S->pool_n++] = s;
    S->pool_bytes += S->p->s_size[s];
}

static void pool_remove(St *S, i32 s) {
    if (!S->in_pool[s]) return;
    S->in_pool[s] = 0;
    i32 a = S->pool_prev[s], b = S->pool_next[s];
    if (a >= 0) S->pool_next[a] = b; else S->pool_head = b;
    if (b >= 0) S->pool_prev[b] = a; else S->pool_tail = a;
    i32 last = S->pool_arr[--S->pool_n];
    S->pool_arr[S->pool_pos[s]] = last;
    S->pool_pos[last] = S->pool_pos[s];
    S->pool_bytes -= S->p->s_size[s];
}

/* ---- the event log ------------------------------------------------------------------------- */

/* Keep the byte columns current: every change to a storage's residency, pin or lock calls this. */
static inline void reshare(St *S, i32 s) {
    int share = S->material[s] ? (S->pinned[s] ? SHARE_PINNED : S->ref_int[s] > 0 ? SHARE_LOCKED : SHARE_FREE)
                               : SHARE_FREE;
    int old = S->share[s];
    if (share != old) {
        i64 size = S->p->s_size[s];
        S->share_bytes[old] -= size;
        S->share_bytes[share] += size;
        S->share[s] = (unsigned char)share;
    }
}

static int ev_grow(St *S) {
    EvLog *L = &S->ev;
    i64 cap = L->cap ? L->cap * 2 : 4096;
    signed char *k = realloc(L->kind, (size_t)cap);
    if (!k) return 0;
    L->kind = k;
    for (int c = 0; c < N_INT_COLS; c++) {
        i64 *col = realloc(L->ints[c], sizeof(i64) * (size_t)cap);
        if (!col) return 0;
        L->ints[c] = col;
    }
    double *sc = realloc(L->score, sizeof(double) * (size_t)cap);
    if (!sc) return 0;
    L->score = sc;
    double *tm = realloc(L->terms, sizeof(double) * (size_t)(cap * L->n_terms + 1));
    if (!tm) return 0;
    L->terms = tm;
    L->cap = cap;
    return 1;
}

/* Append one row: the state after the event. A policy eviction takes the pending choice's score
 * and terms; every other row has NaN there. */
static void emit(St *S, int kind, i32 s, i32 t, i32 depth) {
    EvLog *L = &S->ev;
    if (L->n == L->cap && !ev_grow(S)) { S->nomem = 1; return; }
    i64 n = L->n++;
    L->kind[n] = (signed char)kind;
    L->ints[C_CLOCK][n] = S->clock;
    L->ints[C_STORAGE][n] = s;
    L->ints[C_TENSOR][n] = t;
    L->ints[C_DEPTH][n] = depth;
    L->ints[C_MEMORY][n] = S->memory;
    L->ints[C_PINNED][n] = S->share_bytes[SHARE_PINNED];
    L->ints[C_LOCKED][n] = S->share_bytes[SHARE_LOCKED];
    L->ints[C_POOL][n] = S->pool_n;
    int chosen = kind == EV_EVICT && S->have_choice;
    double *terms = L->terms + (size_t)n * L->n_terms;
    L->score[n] = chosen ? S->choice_score : NAN;
    for (int k = 0; k < L->n_terms; k++) terms[k] = chosen ? S->choice_terms[k] : NAN;
    if (kind == EV_EVICT) S->have_choice = 0;
}

static void lock(St *S, i32 s) {
    if (S->ref_int[s] == 0) pool_remove(S, s);
    S->ref_int[s]++;
    if (S->ev_on) { reshare(S, s); emit(S, EV_LOCK, s, -1, -1); }
}

static void unlock(St *S, i32 s) {
    if (--S->ref_int[s] == 0) pool_add(S, s);
    if (S->ev_on) reshare(S, s);
}

/* ---- bitsets ------------------------------------------------------------------------------ */

static inline void bset(u64 *b, i32 i) { b[i >> 6] |= ((u64)1) << (i & 63); }
static inline void bclr(u64 *b, i32 i) { b[i >> 6] &= ~(((u64)1) << (i & 63)); }
static inline int bget(const u64 *b, i32 i) { return (int)((b[i >> 6] >> (i & 63)) & 1); }

static inline u64 rword(const Row *r, i32 w) {
    i32 k = w - r->lo;
    return k >= 0 && k < r->n ? r->w[k] : 0;
}
/* Set bits of x (SWAR: no call where the machine has no popcount instruction). */
static inline i64 popcount64(u64 x) {
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return (i64)((x * 0x0101010101010101ULL) >> 56);
}

static inline int rget(const Row *r, i32 i) { return (int)((rword(r, i >> 6) >> (i & 63)) & 1); }
static inline void rclr(Row *r, i32 i) {
    i32 k = (i >> 6) - r->lo;
    if (k >= 0 && k < r->n) r->w[k] &= ~(((u64)1) << (i & 63));
}

/* Widen r's span to hold words [lo, hi); 0 when out of memory. A span that must grow at least
 * doubles on that side (within the bitset's words), so a set built a member at a time in any
 * order moves its words O(log n) times, and a span is at most about 3x its members' extent. */
static int rcover(St *S, Row *r, i32 lo, i32 hi) {
    if (r->n > 0) {
        i32 cur_lo = r->lo, cur_hi = r->lo + r->n;
        if (lo >= cur_lo && hi <= cur_hi) return 1;
        if (lo < cur_lo) { i32 far = cur_lo - r->n; lo = far < 0 ? 0 : (lo < far ? lo : far); }
        else lo = cur_lo;
        if (hi > cur_hi) { i32 far = cur_hi + r->n; if (far > S->words) far = S->words; hi = hi > far ? hi : far; }
        else hi = cur_hi;
    }
    i32 n = hi - lo;
    if (n > r->cap) {
        i32 cap = n > 2 * r->cap ? n : 2 * r->cap;
        u64 *w = realloc(r->w, sizeof(u64) * (size_t)cap);
        if (!w) { S->nomem = 1; return 0; }
        r->w = w;
        r->cap = cap;
    }
    if (r->n > 0) {
        i32 shift = r->lo - lo;
        if (shift) memmove(r->w + shift, r->w, sizeof(u64) * (size_t)r->n);
        memset(r->w, 0, sizeof(u64) * (size_t)shift);
        memset(r->w + shift + r->n, 0, sizeof(u64) * (size_t)(n - shift - r->n));
    } else {
        memset(r->w, 0, sizeof(u64) * (size_t)n);
    }
    r->lo = lo;
    r->n = n;
    return 1;
}

static inline void rset(St *S, Row *r, i32 i) {
    i32 w = i >> 6;
    if ((r->n == 0 || w < r->lo || w >= r->lo + r->n) && !rcover(S, r, w, w + 1)) return;
    r->w[w - r->lo] |= ((u64)1) << (i & 63);
}

/* The words of r that hold members: [*a, *b) relative to r->lo (empty when *a == *b). */
static inline void rextent(const Row *r, i32 *a, i32 *b) {
    i32 i = 0, j = r->n;
    while (i < j && !r->w[i]) i++;
    while (j > i && !r->w[j - 1]) j--;
    *a = i;
    *b = j;
}

/* dst |= src */
static void ror(St *S, Row *dst, const Row *src) {
    i32 a, b;
    rextent(src, &a, &b);
    if (a == b || !rcover(S, dst, src->lo + a, src->lo + b)) return;
    u64 *d = dst->w + (src->lo - dst->lo);
    for (i32 k = a; k < b; k++) d[k] |= src->w[k];
}

static int requal(const Row *a, const Row *b) {
    for (i32 k = 0; k < a->n; k++)
        if (a->w[k] != rword(b, a->lo + k)) return 0;
    for (i32 k = 0; k < b->n; k++)
        if (b->w[k] != rword(a, b->lo + k)) return 0;
    return 1;
}

static void rcopy(St *S, Row *dst, const Row *src) {
    dst->n = 0;
    ror(S, dst, src);
}

/* Run the statements after x with x each member of r, ascending. */
#define FOR_ROW(r, x, ...)                                                                     \
    for (i32 k_ = 0; k_ < (r)->n; k_++)                                                        \
        for (u64 d_ = (r)->w[k_]; d_; d_ &= d_ - 1) {                                          \
            i32 x = (((r)->lo + k_) << 6) + __builtin_ctzll(d_);                               \
            __VA_ARGS__                                                                        \
        }

/* The storage edges one way: forward (each storage's consumers) or back (its inputs),
 * each list ascending by birth. */
typedef struct { const i32 *ptr, *list, *birth; } Adj;
static inline Adj adj_of(const Prog *p, int forward) {
    return forward ? (Adj){p->f_ptr, p->f_list, p->f_birth} : (Adj){p->r_ptr, p->r_list, p->r_birth};
}

static void region_clear(St *S, int forward, i32 s) {
    (forward ? S->fwd_in : S->rev_in)[s].n = 0;
    (forward ? S->fwd_fr : S->rev_fr)[s].n = 0;
    (forward ? S->fwd_c : S->rev_c)[s] = 0;
}

/* Rebuild the regions of up to 64 material bases in one direction at once. Each evicted storage
 * is labelled with the bases that reach it; storages are taken in creation order (edges mostly run
 * from older to newer storages), so a storage is usually expanded once for all the bases that
 * reach it. The sets are exactly those of one traversal per base. */
static void rebuild_group(St *S, int forward, const i32 *bases, int nb) {
    const Prog *p = S->p;
    const Adj e = adj_of(p, forward);
    const i32 *ptr = e.ptr, *list = e.list, *birth = e.birth;
    Row *in_base = forward ? S->fwd_in : S->rev_in, *fr_base = forward ? S->fwd_fr : S->rev_fr;
    i64 *comp = forward ? S->fwd_c : S->rev_c;
    u64 *pend = S->pending;
    const i32 ops = S->ops_created, words = S->words;
    i32 ntouched = 0;
    int lo = words, hi = -1; /* pending words span */
    i32 tlo = words, thi = -1; /* touched words span */
#define PUSH(y, bits)                                                                      \
    do {                                                                                   \
        if (!S->lab[y]) {                                                                  \
            S->touched[ntouched++] = (y);                                                  \
            if (((y) >> 6) < tlo) tlo = (y) >> 6;                                          \
            if (((y) >> 6) > thi) thi = (y) >> 6;                                          \
        }                                                                                  \
        S->lab[y] |= (bits);                                                               \
        S->delta[y] |= (bits);                                                             \
        bset(pend, (y));                                                                   \
        if (((y) >> 6) < lo) lo = (y) >> 6;                                                \
        if (((y) >> 6) > hi) hi = (y) >> 6;                                                \
    } while (0)
    for (int j = 0; j < nb; j++) region_clear(S, forward, bases[j]);
    i64 edges = 0;
    for (int j = 0; j < nb; j++) {
        i32 b = bases[j];
        u64 bit = ((u64)1) << j;
        Row *fr = &fr_base[b];
        for (i32 k = ptr[b], end = ptr[b + 1]; k < end && birth[k] < ops; k++) {
            edges++;
            i32 y = list[k];
            if (S->material[y]) {
                if (y != b) rset(S, fr, y);
            } else if (!(S->lab[y] & bit)) {
                PUSH(y, bit);
            }
        }
    }
    while (lo <= hi) {
        /* forward: ascending ids; reverse: descending */
        int w = forward ? lo : hi;
        u64 word = pend[w];
        if (!word) { if (forward) lo++; else hi--; continue; }
        int bitpos = forward ? __builtin_ctzll(word) : 63 - __builtin_clzll(word);
        i32 x = (w << 6) + bitpos;
        pend[w] &= ~(((u64)1) << bitpos);
        u64 d = S->delta[x];
        S->delta[x] = 0;
        for (i32 k = ptr[x], end = ptr[x + 1]; k < end && birth[k] < ops; k++) {
            i32 y = list[k];
            edges++;
            if (S->material[y]) {
                for (u64 m = d; m; m &= m - 1) {
                    i32 b = bases[__builtin_ctzll(m)];
                    if (y != b) rset(S, &fr_base[b], y);
                }
                continue;
            }
            u64 fresh = d & ~S->lab[y];
            if (fresh) PUSH(y, fresh);
        }
    }
#undef PUSH
    S->region_edges += edges;
    if (!ntouched) return;
    /* Each base's row spans the touched words (cleared above, so it starts empty): the members are
     * then set without a bounds check, a row's words grown once. */
    u64 *row[64];
    for (int j = 0; j < nb; j++) {
        Row *r = &in_base[bases[j]];
        if (!rcover(S, r, tlo, thi + 1)) {
            for (i32 i = 0; i < ntouched; i++) S->lab[S->touched[i]] = 0;
            return;
        }
        row[j] = r->w + (tlo - r->lo);
    }
    for (i32 i = 0; i < ntouched; i++) {
        i32 x = S->touched[i];
        const i64 c = S->s_compute[x];
        const i32 w = (x >> 6) - tlo;
        const u64 bit = ((u64)1) << (x & 63);
        for (u64 m = S->lab[x]; m; m &= m - 1) {
            const int j = __builtin_ctzll(m);
            row[j][w] |= bit;
            comp[bases[j]] += c;
        }
        S->lab[x] = 0;
    }
}

/* ---- Trusted regions -----------------------------------------------------------------------
 * Rebuilding the regions around a computed storage is most of the work: when a run thrashes
 * (the reverse regions downstream of a rematerialized storage) and on long traces (the forward
 * region of a storage with many released descendants, walked again at each of its consumers).
 * Most of those rebuilds only move the new storages from a region's interior to its frontier.
 * A region is "trusted" while its stored sets equal a fresh traversal of the current state; a
 * trusted region is then updated in place (region_fast) instead of traversed again, with exactly
 * the result of the traversal. Trust is kept only on acyclic storage graphs (every public trace;
 * a cycle needs an in-place operator fed by its own output).
 *
 * Forward regions have one more rule. Creating an operator gives its inputs new edges to its
 * outputs, which the reference's regions do not see until the outputs are computed. A trusted
 * forward region is therefore fresh up to a bound while that operator waits to be computed
 * (`window`): every edge (fwd_ops[b] == ops_created), or every edge but the newest operator's.
 * Computing it brings the regions that reach its outputs up to every edge, and untrusts an
 * input whose region the reference leaves as it was (an operator whose outputs were all in
 * memory already); after that every trusted region is fresh over every edge.
 *
 * Trust is lost, so the next rebuild is a full one, whenever the reference's upkeep may leave a
 * region not fresh:
 *   - an eviction whose absorption reads an untrusted region (or, forward, one fresh up to
 *     another bound), or misses a trusted region that has the evicted storage on its frontier
 *     (see evict_trust);
 *   - an operator adding a tensor (hence edges and compute) to a storage that already exists;
 *   - pinning (nothing reads a pinned storage's regions again).
 */

static inline unsigned char *ok_of(St *S, int fwd) { return fwd ? S->fwd_ok : S->rev_ok; }
static inline Row *in_of(St *S, int fwd, i32 b) { return &(fwd ? S->fwd_in : S->rev_in)[b]; }
static inline Row *fr_of(St *S, int fwd, i32 b) { return &(fwd ? S->fwd_fr : S->rev_fr)[b]; }
static inline i64 *comp_of(St *S, int fwd) { return fwd ? S->fwd_c : S->rev_c; }

/* The first of x's forward edges born at or after operator op (its list ascends by birth). */
static i32 first_born_from(const Prog *p, i32 x, i32 op) {
    i32 lo = p->f_ptr[x], hi = p->f_ptr[x + 1];
    while (lo < hi) {
        i32 mid = lo + (hi - lo) / 2;
        if (p->f_birth[mid] < op) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* The operators whose edges b's trusted region reflects (edges born before it). Once the newest
 * operator is computed, every trusted region that reaches its edges has taken them in. */
static inline i32 bound_of(const St *S, int fwd, i32 b) {
    return fwd && S->window && S->fwd_ops[b] < S->ops_created ? S->ops_created - 1 : S->ops_created;
}

/* Self-check (the `check` option, for tests): b's trusted region against a fresh traversal up to
 * its bound, which leaves it as it was when they agree. */
static void check_region(St *S, int fwd, i32 b) {
    i64 c = comp_of(S, fwd)[b], edges = S->region_edges;
    const i32 ops = S->ops_created;
    rcopy(S, &S->check_in, in_of(S, fwd, b));
    rcopy(S, &S->check_fr, fr_of(S, fwd, b));
    S->ops_created = bound_of(S, fwd, b);
    rebuild_group(S, fwd, &b, 1);
    S->ops_created = ops;
    S->region_edges = edges;
    if (!requal(&S->check_in, in_of(S, fwd, b)) || !requal(&S->check_fr, fr_of(S, fwd, b)) ||
        c != comp_of(S, fwd)[b]) {
        S->stale = b + 1;
        S->stale_what = fwd ? "forward region" : "reverse region";
    }
}

/* Every trusted region against the truth. */
static void check_all(St *S) {
    i32 n = S->p->n_storages;
    for (int fwd = 0; fwd < 2; fwd++) {
        unsigned char *ok = ok_of(S, fwd);
        for (i32 x = 0; x < n && !S->stale; x++)
            if (ok[x]) check_region(S, fwd, x);
    }
}

static inline void untrust(St *S, int fwd, i32 b) { ok_of(S, fwd)[b] = 0; }

/* b's region was just traversed afresh, over every edge born. */
static void trust(St *S, int fwd, i32 b) {
    if (fwd) S->fwd_ops[b] = S->ops_created;
    if (S->trust_on && !S->pinned[b]) ok_of(S, fwd)[b] = 1;
}

/* Whether storage c has a neighbour born before `bound` that is b or inside b's region `in`:
 * looking back along the traversal's direction (a forward region reaches c from c's inputs). */
static int feeds(const St *S, int fwd, i32 c, i32 b, const Row *in, i32 bound) {
    const Adj e = adj_of(S->p, !fwd);
    for (i32 k = e.ptr[c], end = e.ptr[c + 1]; k < end && e.birth[k] < bound; k++) {
        i32 y = e.list[k];
        if (y == b || rget(in, y)) return 1;
    }
    return 0;
}

static void refresh_frontier_bit(St *S, int fwd, i32 b, i32 c, i32 bound) {
    Row *fr = fr_of(S, fwd, b);
    int now = feeds(S, fwd, c, b, in_of(S, fwd, b), bound), was = rget(fr, c);
    if (now == was) return;
    if (now) rset(S, fr, c);
    else rclr(fr, c);
}

/* The region of trusted b after the storages rs[k] with leaf[k] set became material; a leaf has
 * no neighbour in the traversal's direction that is not material, so only it leaves b's region
 * and only it and those neighbours can enter or leave the frontier. At the computation of the
 * newest operator (top), a forward region that did not see its edges takes them in: its
 * outputs, now in memory, join the frontier. Returns 0 (nothing changed) when that does not
 * hold. */
static int region_fast(St *S, int fwd, i32 b, const i32 *rs, const unsigned char *leaf, i32 nrs, int top) {
    if (!ok_of(S, fwd)[b]) return 0;
    const Prog *p = S->p;
    const i32 bound = bound_of(S, fwd, b);
    const int take_new = fwd && top && bound < S->ops_created;
    Row *in = in_of(S, fwd, b);
    int any = 0;
    for (i32 k = 0; k < nrs; k++)
        if (rget(in, rs[k])) {
            if (!leaf[k]) return 0;
            any = 1;
        }
    if (!any && !take_new) return 0;
    unsigned char *gone = S->op_gone;
    i64 *comp = comp_of(S, fwd);
    for (i32 k = 0; k < nrs; k++) {
        gone[k] = (unsigned char)rget(in, rs[k]);
        if (gone[k]) { rclr(in, rs[k]); comp[b] -= S->s_compute[rs[k]]; }
    }
    const Adj e = adj_of(p, fwd);
    for (i32 k = 0; k < nrs; k++) {
        if (!gone[k]) continue;
        i32 s = rs[k];
        refresh_frontier_bit(S, fwd, b, s, bound);
        for (i32 j = e.ptr[s], end = e.ptr[s + 1]; j < end && e.birth[j] < bound; j++)
            refresh_frontier_bit(S, fwd, b, e.list[j], bound);
    }
    if (take_new) {
        /* b's own edges to the newest operator's outputs: its inputs are all in memory, so no
         * other storage in b's region has such an edge */
        Row *fr = fr_of(S, 1, b);
        const i32 op = S->ops_created - 1;
        for (i32 j = first_born_from(p, b, op), end = p->f_ptr[b + 1]; j < end && p->f_birth[j] == op; j++) {
            i32 y = p->f_list[j];
            rset(S, fr, y);
        }
        S->fwd_ops[b] = S->ops_created;
    }
    S->region_updates++;
    if (S->check) check_region(S, fwd, b);
    return 1;
}

/* Whether every born neighbour of s in the traversal's direction is in memory (s's own region
 * in that direction would be empty). */
static int is_leaf(const St *S, int fwd, i32 s) {
    const Adj e = adj_of(S->p, fwd);
    for (i32 k = e.ptr[s], end = e.ptr[s + 1]; k < end && e.birth[k] < S->ops_created; k++)
        if (!S->material[e.list[k]]) return 0;
    return 1;
}

/* Update the trusted regions among `bases` now that rs became material; the others are moved to
 * the front of `bases` and their number returned, for a full rebuild. */
static i32 update_trusted(St *S, int fwd, const i32 *rs, i32 nrs, i32 *bases, i32 n, int top) {
    unsigned char *leaf = S->op_leaf;
    for (i32 k = 0; k < nrs; k++) leaf[k] = (unsigned char)is_leaf(S, fwd, rs[k]);
    i32 slow = 0;
    for (i32 k = 0; k < n; k++)
        if (!region_fast(S, fwd, bases[k], rs, leaf, nrs, top)) bases[slow++] = bases[k];
    return slow;
}

/* The forward region of s, just rematerialized, taken from an input b whose trusted forward region
 * held s and is fresh over every edge, b now having no consumer out of memory: s was b's only
 * consumer out of memory, so all that b's region held beyond s is reached through s (regions are
 * trusted on acyclic storage graphs only). s's region is then b's less s, its frontier b's less
 * those of b's own consumers that nothing in the new region feeds, its compute b's less s's; a
 * long rematerialization chain hands its downstream on this way instead of walking it at each
 * link. Returns 0 where no input qualifies (s is then rebuilt). */
static int region_transfer(St *S, i32 s, const i32 *inputs, i32 n) {
    const Prog *p = S->p;
    const i32 ops = S->ops_created;
    for (i32 i = 0; i < n; i++) {
        const i32 b = inputs[i];
        if (!S->fwd_ok[b] || bound_of(S, 1, b) != ops || !rget(&S->fwd_in[b], s) || !is_leaf(S, 1, b)) continue;
        Row *in = &S->fwd_in[s], *fr = &S->fwd_fr[s];
        rcopy(S, in, &S->fwd_in[b]);
        rclr(in, s);
        rcopy(S, fr, &S->fwd_fr[b]);
        for (i32 k = p->f_ptr[b], end = p->f_ptr[b + 1]; k < end && p->f_birth[k] < ops; k++) {
            const i32 y = p->f_list[k];
            if (y != s && rget(fr, y) && !feeds(S, 1, y, s, in, ops)) rclr(fr, y);
        }
        S->fwd_c[s] = S->fwd_c[b] - S->s_compute[s];
        S->region_updates++;
        S->region_transfers++;
        trust(S, 1, s);
        if (S->check) check_region(S, 1, s);
        return 1;
    }
    return 0;
}

/* Rebuild the regions of `bases` (material) from scratch, in groups of 64. */
static void rebuild_regions(St *S, int forward, const i32 *bases, i32 n) {
    S->region_rebuilds += n; /* trusted or not before, each is a fresh traversal after */
    for (i32 i = 0; i < n; i += 64) rebuild_group(S, forward, bases + i, n - i < 64 ? (int)(n - i) : 64);
    for (i32 i = 0; i < n; i++) trust(S, forward, bases[i]);
}

/* The reference's incremental upkeep: region r takes in evicted frontier storage s and o, the
 * region of s in the same direction; s counts again if it was already inside (kept for parity).
 * The compute it adds is that of o's members new to r. When o is trusted its sum is exact, so
 * when most of o is new to r the sum is o's less that of the members r already holds: the
 * per-member walk (a cache miss each) then covers the smaller part. A chain of released storages
 * hands each region on a set that grows with the chain, almost all of it new. */
static void region_absorb(St *S, int forward, i32 r, i32 s) {
    Row *rin = &(forward ? S->fwd_in : S->rev_in)[r], *rfr = &(forward ? S->fwd_fr : S->rev_fr)[r];
    const Row *oin = &(forward ? S->fwd_in : S->rev_in)[s], *ofr = &(forward ? S->fwd_fr : S->rev_fr)[s];
    i64 *rc = forward ? S->fwd_c : S->rev_c;
    rclr(rfr, s);
    ror(S, rfr, ofr);
    int s_in_diff = 0;
    i64 add = 0;
    i32 a, b;
    rextent(oin, &a, &b);
    if (a < b && rcover(S, rin, oin->lo + a, oin->lo + b)) {
        u64 *ri = rin->w + (oin->lo - rin->lo);
        const i32 sw = (s >> 6) - oin->lo;
        if (sw >= a && sw < b && ((oin->w[sw] & ~ri[sw]) >> (s & 63) & 1)) s_in_diff = 1;
        int by_common = 0;
        if (S->trust_on && ok_of(S, forward)[s]) {
            i64 fresh = 0, common = 0;
            for (i32 k = a; k < b; k++) {
                fresh += popcount64(oin->w[k] & ~ri[k]);
                common += popcount64(oin->w[k] & ri[k]);
            }
            by_common = common < fresh;
        }
        if (by_common) {
            i64 held = 0;
            for (i32 k = a; k < b; k++) {
                i32 w = oin->lo + k;
                for (u64 d = oin->w[k] & ri[k]; d; d &= d - 1) held += S->s_compute[(w << 6) + __builtin_ctzll(d)];
                ri[k] |= oin->w[k];
            }
            add = rc[s] - held;
        } else {
            for (i32 k = a; k < b; k++) {
                u64 d = oin->w[k] & ~ri[k];
                if (!d) continue;
                i32 w = oin->lo + k;
                ri[k] |= d;
                for (; d; d &= d - 1) add += S->s_compute[(w << 6) + __builtin_ctzll(d)];
            }
        }
    }
    if (!s_in_diff) add += S->s_compute[s];
    rset(S, rin, s);
    rc[r] += add;
}

/* ---- equivalence classes: union-find, value at the root ----------------------------------- */

/* A storage gets a node of value 0 when its first operator is created, as the reference's does:
 * until it is first computed it is not in memory, so a neighbour evicted meanwhile (to free room
 * for that very operator) merges with it, and its first computation then takes its compute off
 * that class. Computing it clears the node for good; evicting it makes a new one. */
#define ECN_UNMADE (-1)
#define ECN_CLEARED (-2)

static i32 uf_new(St *S, i64 value) {
    if (S->uf_n == S->uf_cap) {
        i32 cap = S->uf_cap ? S->uf_cap * 2 : 1024;
        i32 *pp = realloc(S->uf_parent, sizeof(i32) * cap);
        i64 *vv = pp ? realloc(S->uf_value, sizeof(i64) * cap) : NULL;
        if (pp) S->uf_parent = pp;
        if (!pp || !vv) { S->nomem = 1; return -1; }
        S->uf_value = vv;
        S->uf_cap = cap;
    }
    S->uf_parent[S->uf_n] = S->uf_n;
    S->uf_value[S->uf_n] = value;
    return S->uf_n++;
}

static i32 uf_find(St *S, i32 x) {
    i32 root = x;
    while (S->uf_parent[root] != root) root = S->uf_parent[root];
    while (S->uf_parent[x] != root) { i32 nx = S->uf_parent[x]; S->uf_parent[x] = root; x = nx; }
    return root;
}

static void next_stamp(St *S) {
    if (++S->stamp == INT32_MAX) {
        memset(S->mark, 0, sizeof(i32) * S->p->n_storages);
        memset(S->mark2, 0, sizeof(i32) * S->p->n_storages);
        memset(S->umark, 0, sizeof(i32) * S->p->n_storages);
        if (S->node_mark) memset(S->node_mark, 0, sizeof(i32) * S->node_mark_cap);
        S->stamp = 1;
    }
}

/* Visit each distinct evicted storage adjacent to s (through parents and children). */
#define FOR_EVICTED_NEIGHBORS(S, s, n, ...)                                                    \
    do {                                                                                       \
        const Prog *p_ = (S)->p;                                                               \
        next_stamp(S);                                                                         \
        for (int dir_ = 0; dir_ < 2; dir_++) {                                                 \
            const i32 *ptr_ = dir_ ? p_->f_ptr : p_->r_ptr, *list_ = dir_ ? p_->f_list : p_->r_list; \
            const i32 *birth_ = dir_ ? p_->f_birth : p_->r_birth;                              \
            for (i32 k_ = ptr_[s], e_ = ptr_[(s) + 1]; k_ < e_ && birth_[k_] < (S)->ops_created; k_++) { \
                i32 n = list_[k_];                                                             \
                if ((S)->material[n] || n == (s) || (S)->mark[n] == (S)->stamp) continue;      \
                (S)->mark[n] = (S)->stamp;                                                     \
                __VA_ARGS__                                                                    \
            }                                                                                  \
        }                                                                                      \
    } while (0)

static i64 eq_class_cost(St *S, i32 s) {
    i64 total = 0;
    if (S->node_mark_cap < S->uf_n) {
        i32 cap = S->uf_cap;
        i32 *nm = realloc(S->node_mark, sizeof(i32) * cap);
        if (!nm) { S->nomem = 1; return 0; }
        memset(nm + S->node_mark_cap, 0, sizeof(i32) * (cap - S->node_mark_cap));
        S->node_mark = nm;
        S->node_mark_cap = cap;
    }
    FOR_EVICTED_NEIGHBORS(S, s, n, {
        if (S->ecn[n] >= 0) {
            i32 root = uf_find(S, S->ecn[n]);
            if (S->node_mark[root] != S->stamp) {
                S->node_mark[root] = S->stamp;
                total += S->uf_value[root];
            }
        }
    });
    return total;
}

/* A fresh e* traversal in both directions (the unoptimized DTR): cost and latest access. */
static void fresh_neighborhood(St *S, i32 base, i64 *cost, i64 *latest) {
    const Prog *p = S->p;
    next_stamp(S);
    i64 c = 0, la = S->last_access[base];
    for (int forward = 1; forward >= 0; forward--) {
        i32 *vis = forward ? S->mark : S->mark2;
        const Adj e = adj_of(p, forward);
        i32 top = 0;
        S->dfs[top++] = base;
        while (top) {
            i32 s = S->dfs[--top];
            for (i32 k = e.ptr[s], end = e.ptr[s + 1]; k < end && e.birth[k] < S->ops_created; k++) {
                i32 us = e.list[k];
                if (S->material[us] || vis[us] == S->stamp) continue;
                vis[us] = S->stamp;
                S->dfs[top++] = us;
                if (S->umark[us] != S->stamp) {
                    S->umark[us] = S->stamp;
                    c += S->s_compute[us];
                    if (S->last_access[us] > la) la = S->last_access[us];
                }
            }
        }
    }
    *cost = c;
    *latest = la;
}

/* ---- scores -------------------------------------------------------------------------------- */

/* Feature f of storage s: 0 and the integer in *iv, or 1 and the double in *dv for the values
 * that are infinite (staleness and last_access before a first use, an unbounded budget).
 * *fresh caches the fresh traversal of this evaluation (0: not done yet). */
static inline __attribute__((always_inline)) int feature(St *S, i32 s, i64 f, i64 *iv, double *dv, i64 fresh[3]) {
    const i64 la = S->last_access[s];
    switch (f) {
    case F_COMPUTE: *iv = S->s_compute[s]; return 0;
    case F_SIZE: *iv = S->p->s_size[s]; return 0;
    case F_STALENESS: /* clock - (-inf) */
        if (la == LA_NONE) { *dv = INFINITY; return 1; }
        *iv = S->clock - la;
        return 0;
    case F_ESTAR: *iv = S->fwd_c[s] + S->rev_c[s]; return 0;
    case F_ANCESTORS: *iv = S->rev_c[s]; return 0;
    case F_EQCLASS: *iv = eq_class_cost(S, s); return 0;
    case F_FRESH_ESTAR:
    case F_FRESH_STALENESS:
        if (!fresh[0]) { fresh_neighborhood(S, s, &fresh[1], &fresh[2]); fresh[0] = 1; }
        if (f == F_FRESH_ESTAR) { *iv = fresh[1]; return 0; }
        if (fresh[2] == LA_NONE) { *dv = INFINITY; return 1; }
        *iv = S->clock - fresh[2];
        return 0;
    case F_LAST_ACCESS:
        if (la == LA_NONE) { *dv = -INFINITY; return 1; }
        *iv = la;
        return 0;
    case F_CLOCK: *iv = S->clock; return 0;
    case F_EVICTIONS: *iv = S->hist_evict[s]; return 0;
    case F_REMATS: *iv = S->hist_remat[s]; return 0;
    case F_BUDGET:
        if (S->budget == INT64_MAX) { *dv = INFINITY; return 1; }
        *iv = S->budget;
        return 0;
    default: *iv = S->memory; return 0; /* F_RESIDENT */
    }
}

/* The program on 64-bit integers, reading the features as it goes, for the common shape:
 * integer operations only, with at most one division, the last operation (every built-in
 * score). Returns 0 when a feature is infinite or an integer leaves 64 bits: the caller then
 * runs run_program, which gives the exact result, so this is only a shortcut. */
static int score_i64(St *S, i32 s, Val *out, i64 fresh[3]) {
    i64 st[MAX_STACK];
    int top = 0;
    double unused;
    const Op *code = S->code;
    for (i32 k = 0, n = S->code_n; k < n; k++) {
        const Op *o = &code[k];
        i64 *a = &st[top - 1];
        switch (o->op) {
        case OP_FEATURE: if (feature(S, s, o->arg, &st[top++], &unused, fresh)) return 0; break;
        case OP_INT: st[top++] = o->arg; break;
        case OP_NEG: if (__builtin_sub_overflow((i64)0, *a, a)) return 0; break;
        case OP_POW: {
            i64 r = 1;
            for (i64 e = 0; e < o->arg; e++)
                if (__builtin_mul_overflow(r, *a, &r)) return 0;
            *a = r;
            break;
        }
        case OP_ADD: top--; if (__builtin_add_overflow(st[top - 1], st[top], &st[top - 1])) return 0; break;
        case OP_SUB: top--; if (__builtin_sub_overflow(st[top - 1], st[top], &st[top - 1])) return 0; break;
        case OP_MUL: top--; if (__builtin_mul_overflow(st[top - 1], st[top], &st[top - 1])) return 0; break;
        case OP_MIN: top--; if (st[top] < st[top - 1]) st[top - 1] = st[top]; break;
        case OP_MAX: top--; if (st[top - 1] < st[top]) st[top - 1] = st[top]; break;
        case OP_DIV: /* the last operation */
            top--;
            *out = vdbl(st[top] > 0 ? quotient(st[top - 1], st[top]) : INFINITY);
            return 1;
        }
    }
    *out = vint(st[0]);
    return 1;
}

/* A term of the quotient shape: an integer literal or a feature; 1 when it is infinite. */
static inline __attribute__((always_inline)) int term(St *S, i32 s, const Op *o, i64 *iv, i64 fresh[3]) {
    double unused;
    if (o->op == OP_INT) { *iv = o->arg; return 0; }
    return feature(S, s, o->arg, iv, &unused, fresh);
}

/* The quotient shape without an interpreter loop; 0 where score_i64 would give up. */
static int score_quot(St *S, i32 s, Val *out, i64 fresh[3]) {
    i64 num = 0, den = 1, x;
    for (int k = 0; k < S->num_n; k++)
        if (term(S, s, S->num_terms[k], &x, fresh) || __builtin_add_overflow(num, x, &num)) return 0;
    if (!S->den_n) { *out = vint(num); return 1; }
    for (int k = 0; k < S->den_n; k++)
        if (term(S, s, S->den_terms[k], &x, fresh) || __builtin_mul_overflow(den, x, &den)) return 0;
    *out = vdbl(den > 0 ? quotient(num, den) : INFINITY);
    return 1;
}

static Val score(St *S, i32 s) {
    Val v, fv[N_FEATURES];
    i64 fresh[3] = {0, 0, 0};
    S->evals++;
    if (S->quot_shape ? score_quot(S, s, &v, fresh) : S->integer_shape && score_i64(S, s, &v, fresh)) return v;
    for (i32 k = 0; k < S->feat_n; k++) {
        i32 f = S->feat_list[k];
        i64 iv;
        double dv;
        fv[f] = feature(S, s, f, &iv, &dv, fresh) ? vdbl(dv) : vint(iv);
    }
    return run_program(S->code, S->code_n, S->floats, fv, &S->overflow);
}

static u64 splitmix(u64 *x) {
    u64 z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Whether the search leaves s out as small (below small_percent % of the pool's mean size). */
static inline int too_small(const St *S, i32 s) {
    return S->small_percent &&
           (i128)S->p->s_size[s] * S->pool_n * 100 < (i128)S->pool_bytes * S->small_percent;
}

/* The reference's rule over candidates in turn: the last whose score is <= the best so far
 * (a NaN counts as +inf), stopping at a score of exactly 0 (returns 1). */
static inline int consider(St *S, i32 s, Val *best, i32 *best_s) {
    Val c = score(S, s);
    if (val_le(c, *best)) { *best = c; *best_s = s; }
    else if (c.f && c.d != c.d && best->f && best->d == INFINITY) *best_s = s;
    return val_zero(c);
}

/* The whole pool in its order, the small left out when skip_small. */
static i32 scan_all(St *S, int skip_small, Val *best) {
    i32 best_s = -1;
    for (i32 s = S->pool_head; s >= 0; s = S->pool_next[s])
        if (!(skip_small && too_small(S, s)) && consider(S, s, best, &best_s)) break;
    return best_s;
}

static i32 choose(St *S) {
    if (S->random) {
        S->evals++;
        u64 n = (u64)S->pool_n, lim = UINT64_MAX - UINT64_MAX % n, r;
        do r = splitmix(&S->rng); while (r >= lim); /* unbiased */
        u64 k = r % n;
        i32 s = S->pool_head;
        while (k--) s = S->pool_next[s];
        return s;
    }
    Val best = vdbl(INFINITY);
    i32 best_s = -1;
    if (S->sample) {
        u64 n = (u64)S->pool_n, lim = UINT64_MAX - UINT64_MAX % n, r;
        u64 k = (u64)sqrt((double)(n - 1));
        while (k * k > n - 1) k--;
        while ((k + 1) * (k + 1) <= n - 1) k++;
        for (u64 j = 0; j <= k; j++) { /* ceil(sqrt(n)) draws, with replacement */
            do r = splitmix(&S->rng); while (r >= lim);
            i32 s = S->pool_arr[r % n];
            if (!too_small(S, s) && consider(S, s, &best, &best_s)) break;
        }
    }
    /* no sample, or a sample of small storages only: the exact search, then without the filter */
    if (best_s < 0) best_s = scan_all(S, S->small_percent != 0, &best);
    if (best_s < 0 && S->small_percent) best_s = scan_all(S, 0, &best);
    if (S->ev_on && best_s >= 0) { /* the score and terms of the choice, for its eviction's row */
        i64 fresh[3] = {0, 0, 0};
        S->have_choice = 1;
        S->choice_score = as_dbl(best);
        for (i32 k = 0; k < S->feat_n; k++) {
            i64 iv;
            double dv;
            S->choice_terms[k] = feature(S, best_s, S->feat_list[k], &iv, &dv, fresh) ? dv : (double)iv;
        }
    }
    return best_s;
}

/* ---- eviction ------------------------------------------------------------------------------ */

/* Before the regions (in one direction) that have s on their frontier absorb it: which of them
 * stay trusted. The absorbers are the storages on s's frontier in the other direction. When that
 * frontier is fresh over every edge, every trusted region holding s is among them: a region
 * holds s on its frontier exactly when its base reaches s through evicted storages, and then s's
 * traversal the other way reaches the base. Otherwise a scan finds the trusted regions the
 * absorption would miss. */
static void evict_trust(St *S, int fwd, i32 s) {
    const Row *absorbers = fr_of(S, !fwd, s);
    unsigned char *ok = ok_of(S, fwd);
    const int fresh_source = ok[s];
    const i32 bound = bound_of(S, fwd, s);
    FOR_ROW(absorbers, x, {
        if (S->pinned[x] || !ok[x]) continue;
        if (!fresh_source || !rget(fr_of(S, fwd, x), s) || bound_of(S, fwd, x) != bound) untrust(S, fwd, x);
    })
    if (ok_of(S, !fwd)[s] && bound_of(S, !fwd, s) == S->ops_created) return;
    for (i32 x = 0; x < S->p->n_storages; x++)
        if (ok[x] && rget(fr_of(S, fwd, x), s) && !rget(absorbers, x)) untrust(S, fwd, x);
}

static void evict(St *S, i32 s, int by_policy) {
    const Prog *p = S->p;
    if (S->ex && !S->pyerr) {
        PyObject *r = PyObject_CallFunction(S->ex_drop, "ii", (int)s, by_policy);
        if (r) Py_DECREF(r); else S->pyerr = 1;
    }
    S->material[s] = 0;
    S->memory -= p->s_size[s];
    pool_remove(S, s);
    i32 t0 = p->s_tptr[s], tn = t0 + S->s_live[s];
    for (i32 k = t0; k < tn; k++) S->defined[p->s_tensors[k]] = 0;
    if (by_policy) {
        S->evictions++;
        if (!S->evicted_by_policy[s]) { S->evicted_by_policy[s] = 1; S->distinct++; }
        if (S->cnt_policy) S->cnt_policy[s]++;
        if (S->hist_evict) S->hist_evict[s]++;
    } else {
        S->eager_evictions++;
        if (S->cnt_eager) S->cnt_eager[s]++;
    }
    if (S->ev_on) { reshare(S, s); emit(S, by_policy ? EV_EVICT : EV_EVICT_EAGER, s, -1, -1); }
    if (S->regions_on) {
        if (S->trust_on) evict_trust(S, 1, s);
        FOR_ROW(&S->rev_fr[s], x, if (!S->pinned[x]) region_absorb(S, 1, x, s);)
        if (S->trust_on) evict_trust(S, 0, s);
        FOR_ROW(&S->fwd_fr[s], x, if (!S->pinned[x]) region_absorb(S, 0, x, s);)
        if (S->trust_on) { untrust(S, 0, s); untrust(S, 1, s); }
        region_clear(S, 1, s);
        region_clear(S, 0, s);
    }
    if (S->eq_on) {
        i32 node = uf_new(S, S->s_compute[s]);
        if (node < 0) return;
        S->ecn[s] = node;
        FOR_EVICTED_NEIGHBORS(S, s, n, {
            if (S->ecn[n] >= 0) {
                i32 a = uf_find(S, S->ecn[n]), b = uf_find(S, node);
                if (a != b) { S->uf_parent[a] = b; S->uf_value[b] += S->uf_value[a]; }
            }
        });
    }
}

/* One unit of work done: every tick_every units, the progress callback (see St). 1: it raised. */
static int tick_slow(St *S) {
    S->tick_left = S->tick_every;
    if (!S->progress || !S->tstate) return 0;
    PyEval_RestoreThread(S->tstate);
    PyObject *r = PyObject_CallFunction(S->progress, "LLLLii", (long long)S->clock, (long long)S->remat_ns,
                                        (long long)S->evictions, (long long)S->eager_evictions,
                                        (int)S->ops_created, (int)S->step_now);
    int raised = r == NULL;
    Py_XDECREF(r);
    if (raised) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb && value) PyException_SetTraceback(value, tb);
        Py_XDECREF(type);
        Py_XDECREF(tb);
        S->interrupt = value ? value : Py_NewRef(Py_None);
    }
    S->tstate = PyEval_SaveThread();
    return raised;
}

static inline int tick(St *S) { return --S->tick_left <= 0 && tick_slow(S); }

static int free_for(St *S, i64 need) {
    while (S->memory + need > S->budget) {
        if (S->pool_n == 0) return 0;
        i32 s = choose(S);
        if (S->overflow) return 0;
        evict(S, s, 1);
        if (S->nomem || S->pyerr) return 0;
        if (tick(S)) return 0;
    }
    return 1;
}

/* ---- computing ----------------------------------------------------------------------------- */

/* Operator op adds a tensor to storage s, which already exists: s gains compute, so every region
 * holding it goes stale, and any input of op other than s itself, so its own reverse region does
 * (an in-place operator on s alone changes no region of s's). Its forward region gains no edge of
 * its own: op's edges from s, if any, wait like every new operator's. */
static void alias_untrust(St *S, i32 op, i32 s) {
    const Prog *p = S->p;
    for (i32 j = p->op_arg_ptr[op]; j < p->op_arg_ptr[op + 1]; j++)
        if (st_of(S, p->op_args[j]) != s) { untrust(S, 0, s); break; }
    if (S->material[s]) return; /* a trusted region holds only storages not in memory */
    for (i32 x = 0; x < S->p->n_storages; x++) {
        if (S->rev_ok[x] && rget(&S->rev_in[x], s)) untrust(S, 0, x);
        if (S->fwd_ok[x] && rget(&S->fwd_in[x], s)) untrust(S, 1, x);
    }
}

static void create(St *S, i32 op) {
    const Prog *p = S->p;
    i32 start = p->op_out_start[op], n = p->op_n_out[op];
    for (i32 t = start; t < start + n; t++) {
        i32 s = st_of(S, t);
        int seen = 0;
        i32 t0 = p->s_tptr[s], tn = t0 + S->s_live[s];
        for (i32 k = t0; k < tn; k++)
            if (p->t_op[p->s_tensors[k]] == op) { seen = 1; break; }
        if (!seen && S->s_live[s] && S->trust_on) alias_untrust(S, op, s);
        if (!seen) S->s_compute[s] += p->op_cost[op]; /* an operator counts once per storage */
        if (S->eq_on && S->ecn[s] == ECN_UNMADE) S->ecn[s] = uf_new(S, 0);
        S->s_live[s]++;
        S->ref_ext[s]++;
    }
    S->ops_created = op + 1;
}

/* Append to list (after its n entries) every storage on the frontier, in fr_base, of one of rs
 * that is neither pinned nor one of rs; returns the new length. */
static i32 frontier_members(St *S, const Row *fr_base, const i32 *rs, i32 nrs, i32 *list, i32 n) {
    Row *aff = &S->aff;
    aff->n = 0;
    for (i32 k = 0; k < nrs; k++) ror(S, aff, &fr_base[rs[k]]);
    for (i32 k = 0; k < nrs; k++) rclr(aff, rs[k]);
    FOR_ROW(aff, x, if (!S->pinned[x]) list[n++] = x;)
    return n;
}

/* A cost known once the operator has run (a measured clock): its storages' compute follows, as
 * pyengine's _recost. The follower runs without trusted regions when costs can change. */
static void recost(St *S, i32 op, i64 cost) {
    const Prog *p = S->p;
    i64 *op_cost = (i64 *)p->op_cost; /* the follower's own copy */
    i64 delta = cost - op_cost[op];
    i32 start = p->op_out_start[op], n = p->op_n_out[op];
    op_cost[op] = cost;
    for (i32 k = 0; k < n; k++) {
        i32 s = st_of(S, start + k), seen = 0;
        for (i32 j = 0; j < k; j++) seen |= st_of(S, start + j) == s;
        if (!seen) S->s_compute[s] += delta;
    }
}

/* The executor runs operator op for t and its siblings not defined (in that order): a first run
 * or a rematerialization. Returns the run's cost on its clock. */
static i64 run_executor(St *S, i32 op, i32 t, int remat, i64 cost) {
    const Prog *p = S->p;
    i32 start = p->op_out_start[op], n = p->op_n_out[op];
    PyObject *ts = PyList_New(0), *item;
    int bad = ts == NULL;
    for (i32 k = -1; !bad && k < n; k++) {
        i32 u = k < 0 ? t : start + k;
        if (k >= 0 && (u == t || S->defined[u])) continue;
        item = PyLong_FromLong(u);
        bad = !item || PyList_Append(ts, item) < 0;
        Py_XDECREF(item);
    }
    PyObject *r = bad ? NULL : PyObject_CallFunction(S->ex_compute, "iOi", (int)op, ts, remat);
    Py_XDECREF(ts);
    i64 c = r ? PyLong_AsLongLong(r) : -1;
    Py_XDECREF(r);
    if (!r || (c == -1 && PyErr_Occurred())) { S->pyerr = 1; return cost; }
    if (!remat && c != cost) recost(S, op, c);
    return c;
}

/* After the newest operator's computation: an input whose trusted forward region did not take
 * in the operator's edges (no output of it became material, so the reference left the region
 * as it was) is no longer fresh. */
static void fwd_settle(St *S, i32 op) {
    const Prog *p = S->p;
    for (i32 j = p->op_arg_ptr[op]; j < p->op_arg_ptr[op + 1]; j++) {
        i32 x = st_of(S, p->op_args[j]);
        if (!S->fwd_ok[x] || S->fwd_ops[x] >= S->ops_created) continue;
        i32 k = first_born_from(p, x, op);
        if (k < p->f_ptr[x + 1] && p->f_birth[k] == op) untrust(S, 1, x);
    }
}

static void compute(St *S, i32 t, int remat) {
    const Prog *p = S->p;
    i32 op = p->t_op[t], start = p->op_out_start[op], n = p->op_n_out[op];
    i32 *rs = S->op_rs, nrs = 0; /* storages becoming material: siblings in order, then t */
    unsigned char *dup = S->op_dup;
    for (i32 k = 0; k < n; k++) {
        i32 u = start + k;
        dup[k] = (u != t) && S->defined[u];
        if (u != t && !S->material[st_of(S, u)]) rs[nrs++] = st_of(S, u);
    }
    if (!S->material[st_of(S, t)]) rs[nrs++] = st_of(S, t);
    i64 cost = p->op_cost[op];
    if (S->ex) {
        cost = run_executor(S, op, t, remat, cost);
        if (S->pyerr) return;
    }
    S->clock += cost;
    S->memory += p->op_size[op];
    if (S->memory > S->peak) S->peak = S->memory;
    for (i32 k = 0; k < n; k++) {
        i32 u = start + k;
        if (u == t || !dup[k]) { S->material[st_of(S, u)] = 1; S->defined[u] = 1; }
    }
    if (remat) S->remat_ns += cost;
    for (i32 k = 0; k < n; k++)
        if (dup[k]) S->memory -= p->t_size[start + k];
    for (i32 k = 0; k < nrs; k++) {
        pool_add(S, rs[k]);
        if (remat && S->cnt_remat) S->cnt_remat[rs[k]]++;
        if (remat && S->hist_remat) S->hist_remat[rs[k]]++;
    }
    if (S->ev_on) {
        for (i32 k = 0; k < n; k++) reshare(S, st_of(S, start + k));
        emit(S, remat ? EV_REMAT : EV_COMPUTE, st_of(S, t), t, S->fr_n - 1);
    }
    if (S->regions_on) {
        /* the new storages' own regions, then every region whose edge they sit on; a pinned
         * storage never enters the pool nor leaves memory, so nothing reads its regions again.
         * A rebuild depends only on the state, not on the order: the new storages' forward
         * regions and those of their producers' inputs share one labelled traversal. */
        rebuild_regions(S, 0, rs, nrs);
        i32 na = frontier_members(S, S->rev_fr, rs, nrs, S->aff_list, 0);
        if (S->trust_on) na = update_trusted(S, 1, rs, nrs, S->aff_list, na, !remat);
        /* before the inputs' rebuild: a transfer reads an input's region as it was */
        const int moved = S->trust_on && remat && nrs == 1 && region_transfer(S, rs[0], S->aff_list, na);
        memcpy(S->aff_list + na, rs, sizeof(i32) * nrs);
        rebuild_regions(S, 1, S->aff_list, na + (moved ? 0 : nrs));
        if (S->trust_on && !remat) fwd_settle(S, op);
        if (!remat) S->window = 0;
        i32 nr = frontier_members(S, S->fwd_fr, rs, nrs, S->aff_rev_list, 0);
        if (S->trust_on) nr = update_trusted(S, 0, rs, nrs, S->aff_rev_list, nr, 0);
        rebuild_regions(S, 0, S->aff_rev_list, nr);
    }
    if (S->eq_on) {
        for (i32 k = 0; k < nrs; k++) {
            i32 s = rs[k];
            if (S->ecn[s] >= 0) {
                i32 root = uf_find(S, S->ecn[s]);
                S->uf_value[root] -= S->s_compute[s];
            }
            S->ecn[s] = ECN_CLEARED;
        }
    }
}

static int push_frame(St *S, i32 t, int remat) {
    const Prog *p = S->p;
    if (S->fr_n == S->fr_cap) {
        i32 cap = S->fr_cap ? S->fr_cap * 2 : 256;
#define GROW(ptr, T) do { T *q_ = realloc(ptr, sizeof(T) * cap); if (!q_) { S->nomem = 1; return 0; } ptr = q_; } while (0)
        GROW(S->fr_t, i32); GROW(S->fr_undef_off, i32); GROW(S->fr_undef_n, i32); GROW(S->fr_i, i32);
        GROW(S->fr_remat, unsigned char); GROW(S->fr_wait, unsigned char);
#undef GROW
        S->fr_cap = cap;
    }
    i32 op = p->t_op[t];
    i32 a0 = p->op_arg_ptr[op], a1 = p->op_arg_ptr[op + 1];
    for (i32 j = a0; j < a1; j++) S->last_access[st_of(S, p->op_args[j])] = S->clock;
    for (i32 j = a0; j < a1; j++)
        if (S->defined[p->op_args[j]]) lock(S, st_of(S, p->op_args[j]));
    if (S->undef_n + (a1 - a0) > S->undef_cap) {
        i32 cap = (S->undef_cap ? S->undef_cap * 2 : 1024) + (a1 - a0);
        i32 *u = realloc(S->undef, sizeof(i32) * cap);
        if (!u) { S->nomem = 1; return 0; }
        S->undef = u;
        S->undef_cap = cap;
    }
    i32 f = S->fr_n++;
    S->fr_t[f] = t;
    S->fr_remat[f] = (unsigned char)remat;
    S->fr_undef_off[f] = S->undef_n;
    for (i32 j = a0; j < a1; j++)
        if (!S->defined[p->op_args[j]]) S->undef[S->undef_n++] = p->op_args[j];
    S->fr_undef_n[f] = S->undef_n - S->fr_undef_off[f];
    S->fr_i[f] = 0;
    S->fr_wait[f] = 0;
    return 1;
}

/* Materialize t, rematerializing missing inputs first: an explicit stack, never recursion. */
static int materialize(St *S, i32 t0, int remat0) {
    const Prog *p = S->p;
    if (!push_frame(S, t0, remat0)) return OUT_NOMEM;
    while (S->fr_n) {
        i32 f = S->fr_n - 1;
        if (S->fr_i[f] < S->fr_undef_n[f]) {
            i32 par = S->undef[S->fr_undef_off[f] + S->fr_i[f]];
            if (!S->fr_wait[f] && !S->defined[par]) {
                S->fr_wait[f] = 1;
                if (!push_frame(S, par, 1)) return OUT_NOMEM;
                continue;
            }
            lock(S, st_of(S, par));
            S->fr_i[f]++;
            S->fr_wait[f] = 0;
            continue;
        }
        i32 t = S->fr_t[f], op = p->t_op[t];
        i64 need = p->op_size[op];
        if (S->memory + need > S->budget && !free_for(S, need)) {
            S->need = need;
            return S->nomem       ? OUT_NOMEM
                   : S->overflow  ? OUT_OVERFLOW
                   : S->pyerr     ? OUT_PYERR
                   : S->interrupt ? OUT_INTERRUPTED
                                  : OUT_OOM;
        }
        compute(S, t, S->fr_remat[f]);
        if (S->pyerr) return OUT_PYERR;
        if (S->check && S->trust_on) check_all(S);
        if (S->stale) return OUT_STALE;
        for (i32 j = p->op_arg_ptr[op]; j < p->op_arg_ptr[op + 1]; j++) unlock(S, st_of(S, p->op_args[j]));
        S->undef_n = S->fr_undef_off[f];
        S->fr_n--;
        if ((double)S->remat_ns > S->remat_limit) return OUT_REMAT;
        if (S->nomem) return OUT_NOMEM;
        if (tick(S)) return OUT_INTERRUPTED;
    }
    return OUT_OK;
}

/* Steps [*done, end) of the schedule; *done counts each step as it is taken. */
static int run_steps(St *S, i32 *done, i32 end) {
    const Prog *p = S->p;
    while (*done < end) {
        i32 k = (*done)++;
        i32 x = p->step_target[k];
        S->step_now = k;
        switch (p->step_kind[k]) {
        case STEP_COMPUTE: {
            create(S, x);
            S->window = 1;
            i32 start = p->op_out_start[x], n = p->op_n_out[x];
            int r = materialize(S, start, 0);
            if (r != OUT_OK) return r;
            for (i32 t = start; t < start + n; t++) S->last_access[st_of(S, t)] = S->clock;
            break;
        }
        case STEP_GET:
            S->ref_ext[st_of(S, x)]++;
            break;
        case STEP_PIN: {
            if (!S->defined[x]) {
                int r = materialize(S, x, 1);
                if (r != OUT_OK) return r;
            }
            i32 s = st_of(S, x);
            if (!S->pinned[s]) {
                lock(S, s);
                if (S->trust_on) { untrust(S, 0, s); untrust(S, 1, s); }
                S->pinned[s] = 1;
                if (S->ev_on) reshare(S, s);
            }
            break;
        }
        case STEP_RELEASE: {
            i32 s = st_of(S, x);
            S->ref_ext[s]--;
            if (S->eager && S->ref_ext[s] == 0 && S->material[s] && !S->pinned[s]) evict(S, s, 0);
            break;
        }
        }
        if (S->nomem) return OUT_NOMEM;
        if (S->pyerr) return OUT_PYERR;
        if (tick(S)) return OUT_INTERRUPTED;
    }
    return OUT_OK;
}

static int run_schedule(St *S) {
    i32 done = 0;
    return run_steps(S, &done, S->p->n_steps);
}

/* ---- Python glue --------------------------------------------------------------------------- */

static void st_free(St *S) {
    Row *rows[] = {S->fwd_in, S->fwd_fr, S->rev_in, S->rev_fr};
    for (int k = 0; k < 4; k++)
        if (rows[k])
            for (i32 s = 0; s <= S->p->n_storages; s++) free(rows[k][s].w);
    void *ptrs[] = {S->defined, S->material, S->pinned, S->in_pool, S->ref_int, S->ref_ext,
                    S->s_compute, S->last_access, S->s_live, S->pool_prev, S->pool_next, S->pool_arr, S->pool_pos, S->fwd_in,
                    S->fwd_fr, S->rev_in, S->rev_fr, S->fwd_c, S->rev_c,
                    S->aff.w, S->rev_ok, S->fwd_ok, S->fwd_ops, S->check_in.w, S->check_fr.w, S->aff_list, S->aff_rev_list, S->touched, S->lab, S->delta, S->pending, S->dfs, S->ecn, S->uf_parent, S->uf_value, S->mark, S->mark2,
                    S->umark, S->node_mark, S->fr_t, S->fr_undef_off, S->fr_undef_n, S->fr_i, S->fr_remat,
                    S->fr_wait, S->undef, S->evicted_by_policy, S->op_rs, S->op_dup, S->op_leaf, S->op_gone, S->hist_evict, S->hist_remat, S->share,
                    S->ev.kind, S->ev.score, S->ev.terms};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) free(ptrs[i]);
    for (int c = 0; c < N_INT_COLS; c++) free(S->ev.ints[c]);
}

/* Whether the storage graph (every edge, born or not) has no cycle: Kahn's algorithm, with
 * `stack` and `indeg` as scratch of n_storages + 1 entries. */
static int acyclic(const Prog *p, i32 *stack, i32 *indeg) {
    i32 n = p->n_storages, top = 0, seen = 0;
    memset(indeg, 0, sizeof(i32) * n);
    for (i32 k = 0; k < p->f_ptr[n]; k++) indeg[p->f_list[k]]++;
    for (i32 x = 0; x < n; x++) if (!indeg[x]) stack[top++] = x;
    while (top) {
        i32 x = stack[--top];
        seen++;
        for (i32 k = p->f_ptr[x]; k < p->f_ptr[x + 1]; k++)
            if (!--indeg[p->f_list[k]]) stack[top++] = p->f_list[k];
    }
    memset(indeg, 0, sizeof(i32) * n);
    return seen == n;
}

/* The program's arrays, by name: cengine.py hands a dict of exactly these (BUFFERS). */
typedef struct {
    const char *name;
    Py_ssize_t itemsize;
    size_t offset;
} BufSpec;

#define BUF(field, size) {#field, size, offsetof(Prog, field)}
static const BufSpec BUFS[] = {
    BUF(op_cost, 8),     BUF(op_size, 8),   BUF(op_out_start, 4), BUF(op_n_out, 4),  BUF(op_arg_ptr, 4),
    BUF(op_args, 4),     BUF(t_op, 4),      BUF(t_storage, 4),    BUF(t_size, 8),    BUF(s_size, 8),
    BUF(s_tptr, 4),      BUF(s_tensors, 4), BUF(step_kind, 1),    BUF(step_target, 4), BUF(f_ptr, 4),
    BUF(f_list, 4),      BUF(f_birth, 4),   BUF(r_ptr, 4),        BUF(r_list, 4),    BUF(r_birth, 4),
    BUF(s_const, 1),
};
#undef BUF
#define N_BUFS ((int)(sizeof BUFS / sizeof BUFS[0]))

/* Borrow every named buffer into P; on failure release what was taken and return -1. */
static int take_buffers(PyObject *bufs, Prog *P, Py_buffer *views) {
    if (!PyDict_Check(bufs)) {
        PyErr_SetString(PyExc_TypeError, "bufs must be a dict of the arrays named in BUFFERS");
        return -1;
    }
    for (int i = 0; i < N_BUFS; i++) {
        PyObject *obj = PyDict_GetItemString(bufs, BUFS[i].name);
        if (!obj || PyObject_GetBuffer(obj, &views[i], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0 ||
            views[i].itemsize != BUFS[i].itemsize) {
            if (obj && !PyErr_Occurred()) PyBuffer_Release(&views[i]);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "buffer %s: missing, or not %d-byte items", BUFS[i].name,
                             (int)BUFS[i].itemsize);
            for (int j = 0; j < i; j++) PyBuffer_Release(&views[j]);
            return -1;
        }
        *(const void **)((char *)P + BUFS[i].offset) = views[i].buf;
    }
    P->n_ops = (i32)(views[0].len / 8);              /* op_cost */
    P->n_tensors = (i32)(views[6].len / 4);          /* t_op */
    P->n_storages = (i32)(views[9].len / 8);         /* s_size */
    P->n_steps = (i32)(views[13].len / 4);           /* step_target */
    if (views[N_BUFS - 1].len != P->n_storages) {     /* s_const */
        PyErr_SetString(PyExc_ValueError, "buffer s_const must hold one byte per storage");
        for (int j = 0; j < N_BUFS; j++) PyBuffer_Release(&views[j]);
        return -1;
    }
    return 0;
}

/* Whether the program is t (t add)* [t (t mul)* div], each t a feature or an integer: the
 * shape of most scores (every built-in one), evaluated by score_quot. */
static void quotient_shape(St *S, const Op *ops, i32 n) {
    i32 k = 0;
    S->quot_shape = S->num_n = S->den_n = 0;
#define TERM(o) ((o).op == OP_FEATURE || (o).op == OP_INT)
    if (n == 0 || !TERM(ops[0])) return;
    S->num_terms[S->num_n++] = &ops[k++];
    while (k + 1 < n && TERM(ops[k]) && ops[k + 1].op == OP_ADD) { S->num_terms[S->num_n++] = &ops[k]; k += 2; }
    if (k < n) {
        if (!TERM(ops[k])) return;
        S->den_terms[S->den_n++] = &ops[k++];
        while (k + 1 < n && TERM(ops[k]) && ops[k + 1].op == OP_MUL) { S->den_terms[S->den_n++] = &ops[k]; k += 2; }
        if (k != n - 1 || ops[k].op != OP_DIV) { S->den_n = 0; return; }
    }
#undef TERM
    S->quot_shape = 1;
}

/* A postfix program from Python: int64 (opcode, argument) pairs and float64 constants; checks
 * every opcode, feature, constant index and the stack, so run_program may trust it. */
static int take_program(St *S, Py_buffer *code, Py_buffer *floats) {
    if (code->itemsize != 8 || code->len % 16 || floats->itemsize != 8) {
        PyErr_SetString(PyExc_TypeError, "code must be int64 pairs and floats float64");
        return -1;
    }
    const Op *ops = code->buf;
    i32 n = (i32)(code->len / 16), nf = (i32)(floats->len / 8);
    int top = 0, used[N_FEATURES] = {0};
    for (i32 k = 0; k < n; k++) {
        i64 op = ops[k].op, arg = ops[k].arg;
        int pops = op == OP_FEATURE || op == OP_INT || op == OP_FLOAT ? 0
                   : op == OP_NEG || op == OP_LOG || op == OP_POW     ? 1
                                                                      : 2;
        if (op < 0 || op >= N_OPCODES || (op == OP_FEATURE && (arg < 0 || arg >= N_FEATURES)) ||
            (op == OP_FLOAT && (arg < 0 || arg >= nf)) || (op == OP_POW && (arg < 0 || arg > 1024)) ||
            top < pops || top - pops + 1 > MAX_STACK) {
            PyErr_Format(PyExc_ValueError, "bad score program at instruction %d", (int)k);
            return -1;
        }
        if (op == OP_FEATURE) used[arg] = 1;
        top += 1 - pops;
    }
    if (top != 1) {
        PyErr_SetString(PyExc_ValueError, "a score program must leave one value");
        return -1;
    }
    S->code = ops;
    S->code_n = n;
    S->floats = floats->buf;
    for (int f = 0; f < N_FEATURES; f++)
        if (used[f]) S->feat_list[S->feat_n++] = f;
    S->integer_shape = integer_shape(ops, n);
    quotient_shape(S, ops, n);
    return 0;
}

/* The event log's columns by name, as bytes (int8 kind, int64 columns, float64 score and terms). */
static PyObject *events_dict(const St *S) {
    const EvLog *L = &S->ev;
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    Py_ssize_t n = (Py_ssize_t)L->n;
    struct { const char *name; const void *buf; Py_ssize_t len; } cols[N_INT_COLS + 3];
    cols[0].name = "kind"; cols[0].buf = L->kind; cols[0].len = n;
    for (int c = 0; c < N_INT_COLS; c++) {
        cols[1 + c].name = INT_COLUMN_NAMES[c]; cols[1 + c].buf = L->ints[c]; cols[1 + c].len = n * 8;
    }
    cols[N_INT_COLS + 1].name = "score"; cols[N_INT_COLS + 1].buf = L->score; cols[N_INT_COLS + 1].len = n * 8;
    cols[N_INT_COLS + 2].name = "terms"; cols[N_INT_COLS + 2].buf = L->terms;
    cols[N_INT_COLS + 2].len = n * 8 * L->n_terms;
    for (int c = 0; c < N_INT_COLS + 3; c++) {
        PyObject *b = PyBytes_FromStringAndSize(cols[c].len ? (const char *)cols[c].buf : "", cols[c].len);
        if (!b || PyDict_SetItemString(d, cols[c].name, b) < 0) { Py_XDECREF(b); Py_DECREF(d); return NULL; }
        Py_DECREF(b);
    }
    return d;
}

/* The engine where it ran out of memory: the frame stack as (tensor, remat) int64 pairs, outermost
 * first, and every resident storage as (storage, OOM reason) pairs, ascending. */
static PyObject *oom_dict(const St *S) {
    const Prog *p = S->p;
    i32 ns = p->n_storages, nres = 0;
    i64 *frames = malloc(sizeof(i64) * 2 * (size_t)(S->fr_n + 1));
    i64 *res = malloc(sizeof(i64) * 2 * (size_t)(ns + 1));
    PyObject *out = NULL;
    if (!frames || !res) { free(frames); free(res); return PyErr_NoMemory(); }
    for (i32 f = 0; f < S->fr_n; f++) { frames[2 * f] = S->fr_t[f]; frames[2 * f + 1] = S->fr_remat[f]; }
    for (i32 s = 0; s < ns; s++) {
        if (!S->material[s]) continue;
        int reason = S->pinned[s] ? (p->s_const[s] ? R_PINNED_CONSTANT : R_PINNED_OUTPUT)
                     : S->ref_int[s] > 0 ? R_LOCKED
                     : S->in_pool[s]     ? R_EVICTABLE
                                         : R_OUTSIDE_POOL;
        res[2 * nres] = s;
        res[2 * nres + 1] = reason;
        nres++;
    }
    out = Py_BuildValue("{s:L,s:L,s:i,s:y#,s:y#}", "clock_ns", (long long)S->clock, "memory_bytes",
                        (long long)S->memory, "pool_size", (int)S->pool_n, "frames", (const char *)frames,
                        (Py_ssize_t)(16 * S->fr_n), "residents", (const char *)res, (Py_ssize_t)(16 * nres));
    free(frames);
    free(res);
    return out;
}

/* A run's state on program P, allocated and set up (code NULL: the random policy; trust: trusted
 * reverse regions may be kept, see above). 0, or -1 with an exception set and nothing held. */
static int st_init(St *S, Prog *P, long long budget, Py_buffer *code, Py_buffer *floats, int eager,
                   int regions, int eq, int history, double remat_limit, long long seed, int want_events,
                   int check, int trust) {
    memset(S, 0, sizeof *S);
    int have_code = code != NULL;
    S->p = P;
    S->budget = budget;
    S->random = !have_code;
    if (have_code && take_program(S, code, floats) < 0) return -1;
    S->eager = eager; S->regions_on = regions; S->eq_on = eq;
    S->remat_limit = remat_limit;
    S->rng = (u64)seed;
    S->ev_on = want_events;
    S->ev.n_terms = S->random ? 0 : S->feat_n;
    S->check = check;
    S->clock = 1;
    S->pool_head = S->pool_tail = -1;
    i32 nt = P->n_tensors, ns = P->n_storages;
    S->words = (ns + 63) / 64;
    if (S->words == 0) S->words = 1;
    S->defined = calloc(nt + 1, 1);
    S->material = calloc(ns + 1, 1);
    S->pinned = calloc(ns + 1, 1);
    S->in_pool = calloc(ns + 1, 1);
    S->ref_int = calloc(ns + 1, sizeof(i32));
    S->ref_ext = calloc(ns + 1, sizeof(i64));
    S->s_compute = calloc(ns + 1, sizeof(i64));
    S->last_access = malloc(sizeof(i64) * (ns + 1));
    S->s_live = calloc(ns + 1, sizeof(i32));
    S->pool_prev = malloc(sizeof(i32) * (ns + 1));
    S->pool_next = malloc(sizeof(i32) * (ns + 1));
    S->pool_arr = malloc(sizeof(i32) * (ns + 1));
    S->pool_pos = malloc(sizeof(i32) * (ns + 1));
    S->dfs = malloc(sizeof(i32) * (ns + 1));
    S->ecn = malloc(sizeof(i32) * (ns + 1));
    S->mark = calloc(ns + 1, sizeof(i32));
    S->mark2 = calloc(ns + 1, sizeof(i32));
    S->umark = calloc(ns + 1, sizeof(i32));
    S->evicted_by_policy = calloc(ns + 1, 1);
    i32 max_out = 1;
    for (i32 op = 0; op < P->n_ops; op++) if (P->op_n_out[op] > max_out) max_out = P->op_n_out[op];
    S->op_rs = malloc(sizeof(i32) * (size_t)(max_out + 1));
    S->op_dup = malloc((size_t)max_out + 1);
    S->op_leaf = malloc((size_t)max_out + 1);
    S->op_gone = malloc((size_t)max_out + 1);
    int ok = S->op_rs && S->op_dup && S->op_leaf && S->op_gone && S->defined && S->material && S->pinned && S->in_pool && S->ref_int && S->ref_ext &&
             S->s_compute && S->last_access && S->s_live && S->pool_prev && S->pool_next && S->pool_arr && S->pool_pos && S->dfs && S->ecn &&
             S->mark && S->mark2 && S->umark && S->evicted_by_policy;
    if (ok && want_events) {
        S->share = calloc(ns + 1, 1);
        ok = S->share != NULL;
    }
    if (ok && history) {
        S->hist_evict = calloc(ns + 1, sizeof(i64));
        S->hist_remat = calloc(ns + 1, sizeof(i64));
        ok = S->hist_evict && S->hist_remat;
    }
    if (ok && regions) {
        S->fwd_in = calloc(ns + 1, sizeof(Row)); S->fwd_fr = calloc(ns + 1, sizeof(Row));
        S->rev_in = calloc(ns + 1, sizeof(Row)); S->rev_fr = calloc(ns + 1, sizeof(Row));
        S->fwd_c = calloc(ns + 1, sizeof(i64)); S->rev_c = calloc(ns + 1, sizeof(i64));
        S->aff_list = malloc(sizeof(i32) * (ns + 1)); S->aff_rev_list = malloc(sizeof(i32) * (ns + 1));
        S->touched = malloc(sizeof(i32) * (ns + 1));
        S->lab = calloc(ns + 1, sizeof(u64)); S->delta = calloc(ns + 1, sizeof(u64));
        S->pending = calloc(S->words, sizeof(u64));
        S->rev_ok = calloc(ns + 1, 1); S->fwd_ok = calloc(ns + 1, 1);
        S->fwd_ops = calloc(ns + 1, sizeof(i32));
        ok = S->fwd_in && S->fwd_fr && S->rev_in && S->rev_fr && S->fwd_c && S->rev_c &&
             S->aff_list && S->aff_rev_list && S->touched &&
             S->lab && S->delta && S->pending && S->rev_ok && S->fwd_ok && S->fwd_ops;
        S->trust_on = ok && trust && acyclic(P, S->dfs, S->mark);
    }
    if (ok && !regions) { /* scores read these as zero */
        S->fwd_c = calloc(ns + 1, sizeof(i64));
        S->rev_c = calloc(ns + 1, sizeof(i64));
        ok = S->fwd_c && S->rev_c;
    }
    if (!ok) {
        st_free(S);
        PyErr_NoMemory();
        return -1;
    }
    for (i32 s = 0; s < ns; s++) { S->last_access[s] = LA_NONE; S->ecn[s] = ECN_UNMADE; }
    if (budget < 0) S->budget = INT64_MAX;
    S->tick_every = S->tick_left = INT64_MAX;
    return 0;
}

static PyObject *py_run(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bufs", "budget", "code", "floats", "eager", "regions", "eq", "history",
                             "remat_limit", "seed", "counts", "events", "oom", "check", "progress",
                             "progress_every", "sample", "small_percent", NULL};
    PyObject *bufs, *code_obj, *floats_obj, *counts = Py_None, *progress = Py_None;
    long long budget, seed, progress_every = 1 << 12;
    int eager, regions, eq, history, want_events = 0, want_oom = 0, check = 0, sample = 0, small_percent = 0;
    double remat_limit;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OLOOppppdL|OpppOLpi", kwlist, &bufs, &budget, &code_obj,
                                     &floats_obj, &eager, &regions, &eq, &history, &remat_limit, &seed,
                                     &counts, &want_events, &want_oom, &check, &progress, &progress_every,
                                     &sample, &small_percent))
        return NULL;
    if (small_percent < 0 || small_percent > 100) {
        PyErr_SetString(PyExc_ValueError, "small_percent must be in 0..100");
        return NULL;
    }
    if (progress != Py_None && (!PyCallable_Check(progress) || progress_every < 1)) {
        PyErr_SetString(PyExc_TypeError, "progress must be callable, progress_every at least 1");
        return NULL;
    }
    Prog P;
    memset(&P, 0, sizeof P);
    Py_buffer views[N_BUFS];
    if (take_buffers(bufs, &P, views) < 0) return NULL;
    Py_buffer code, floats;
    memset(&code, 0, sizeof code);
    memset(&floats, 0, sizeof floats);
    int have_code = code_obj != Py_None;
    if (have_code && (PyObject_GetBuffer(code_obj, &code, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0 ||
                      PyObject_GetBuffer(floats_obj, &floats, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)) {
        if (code.obj) PyBuffer_Release(&code);
        have_code = 0;
        goto fail_views;
    }

    Py_buffer cviews[3];
    memset(cviews, 0, sizeof cviews);
    int ncounts = 0;
    if (counts != Py_None) {
        if (!PyTuple_Check(counts) || PyTuple_GET_SIZE(counts) != 3) {
            PyErr_SetString(PyExc_TypeError, "counts must be None or a tuple of 3 int64 arrays");
            goto fail_views;
        }
        for (; ncounts < 3; ncounts++) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(counts, ncounts), &cviews[ncounts],
                                   PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0 ||
                cviews[ncounts].len != (Py_ssize_t)8 * P.n_storages) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "count arrays must be int64[n_storages]");
                if (cviews[ncounts].obj) PyBuffer_Release(&cviews[ncounts]);
                goto fail_counts;
            }
        }
    }

    St S;
    if (st_init(&S, &P, budget, have_code ? &code : NULL, &floats, eager, regions, eq, history, remat_limit,
                seed, want_events, check, 1) < 0)
        goto fail_counts;
    S.sample = sample;
    S.small_percent = small_percent;
    if (ncounts) { S.cnt_policy = cviews[0].buf; S.cnt_eager = cviews[1].buf; S.cnt_remat = cviews[2].buf; }
    if (progress != Py_None) {
        S.progress = progress; /* borrowed: the call holds it */
        S.tick_every = S.tick_left = progress_every;
    }

    int outcome;
    S.tstate = PyEval_SaveThread();
    outcome = run_schedule(&S);
    PyEval_RestoreThread(S.tstate);
    S.tstate = NULL;
    PyObject *interrupt = S.interrupt ? S.interrupt : Py_NewRef(Py_None);

    PyObject *result = NULL;
    if (outcome == OUT_NOMEM) {
        PyErr_NoMemory();
    } else if (outcome == OUT_STALE) {
        PyErr_Format(PyExc_AssertionError,
                     "self-check: the trusted %s of storage %d is wrong at clock %lld",
                     S.stale_what, (int)(S.stale - 1), (long long)S.clock);
    } else {
        PyObject *events = want_events ? events_dict(&S) : Py_None;
        if (!want_events) Py_INCREF(Py_None);
        PyObject *oom = events && want_oom && outcome == OUT_OOM ? oom_dict(&S) : Py_None;
        if (oom == Py_None) Py_INCREF(Py_None);
        if (events && oom)
            result = Py_BuildValue("{s:i,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:N,s:N}", "outcome", outcome,
                                   "clock_ns", (long long)S.clock, "remat_ns", (long long)S.remat_ns,
                                   "evictions", (long long)S.evictions, "eager_evictions",
                                   (long long)S.eager_evictions, "distinct_evicted", (long long)S.distinct,
                                   "peak_bytes", (long long)S.peak, "score_evals", (long long)S.evals,
                                   "region_rebuilds", (long long)S.region_rebuilds,
                                   "region_updates", (long long)S.region_updates,
                                   "region_transfers", (long long)S.region_transfers,
                                   "region_edges", (long long)S.region_edges,
                                   "events", events, "oom", oom);
        else { Py_XDECREF(events); Py_XDECREF(oom); }
        if (result && PyDict_SetItemString(result, "interrupt", interrupt) < 0) Py_CLEAR(result);
    }
    Py_DECREF(interrupt);
    st_free(&S);
    for (int i = 0; i < ncounts; i++) PyBuffer_Release(&cviews[i]);
    if (have_code) { PyBuffer_Release(&code); PyBuffer_Release(&floats); }
    for (int i = 0; i < N_BUFS; i++) PyBuffer_Release(&views[i]);
    return result;

fail_counts:
    for (int i = 0; i < ncounts; i++) PyBuffer_Release(&cviews[i]);
fail_views:
    if (have_code) { PyBuffer_Release(&code); PyBuffer_Release(&floats); }
    for (int i = 0; i < N_BUFS; i++) PyBuffer_Release(&views[i]);
    return NULL;
}

/* ---- a followed source: the engine on a whole program, one schedule step at a time ------------
 *
 * Follower(bufs, budget, code, floats, eager, regions, eq, history, seed, executor, fixed_costs)
 * holds a run's state between calls, for a source that knows the whole program in advance (a live
 * step following its plan) and takes its schedule a step at a time. The executor is told what to
 * run, `executor.compute(op, tensors, remat) -> cost`, and what to drop, `executor.drop(storage,
 * by_policy)`, as pyengine's Engine.follow tells it. op_cost must be the follower's own writable
 * array: where fixed_costs is false (a measured clock) a first run's cost replaces it.
 * A method returns an outcome (0 ok, 1 out of memory: the run is over) or raises what the
 * executor raised. */

typedef struct {
    PyObject_HEAD
    Prog P;
    St S;
    Py_buffer views[N_BUFS], code, floats;
    int have_state, have_code, busy, over;
    i32 done; /* schedule steps taken */
} Follower;

/* The executor holds the follower (a session holds its engine) and the follower the executor: a
 * cycle the collector must see. */
static int follower_traverse(Follower *F, visitproc visit, void *arg) {
    Py_VISIT(F->S.ex);
    Py_VISIT(F->S.ex_compute);
    Py_VISIT(F->S.ex_drop);
    return 0;
}

static int follower_clear(Follower *F) {
    Py_CLEAR(F->S.ex);
    Py_CLEAR(F->S.ex_compute);
    Py_CLEAR(F->S.ex_drop);
    F->over = 1; /* no executor to call any more */
    return 0;
}

static void follower_dealloc(Follower *F) {
    PyObject_GC_UnTrack(F);
    follower_clear(F);
    if (F->have_state) {
        st_free(&F->S);
        for (int i = 0; i < N_BUFS; i++) PyBuffer_Release(&F->views[i]);
        if (F->have_code) { PyBuffer_Release(&F->code); PyBuffer_Release(&F->floats); }
    }
    Py_TYPE(F)->tp_free((PyObject *)F);
}

static int follower_init(Follower *F, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bufs", "budget", "code", "floats", "eager", "regions", "eq", "history",
                             "seed", "executor", "fixed_costs", "sample", "small_percent", NULL};
    PyObject *bufs, *code_obj, *floats_obj, *ex;
    long long budget, seed;
    int eager, regions, eq, history, fixed, sample = 0, small_percent = 0;
    if (F->have_state) {
        PyErr_SetString(PyExc_RuntimeError, "a Follower is set up once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OLOOppppLOp|pi", kwlist, &bufs, &budget, &code_obj, &floats_obj,
                                     &eager, &regions, &eq, &history, &seed, &ex, &fixed, &sample,
                                     &small_percent))
        return -1;
    if (small_percent < 0 || small_percent > 100) {
        PyErr_SetString(PyExc_ValueError, "small_percent must be in 0..100");
        return -1;
    }
    memset(&F->P, 0, sizeof F->P);
    if (take_buffers(bufs, &F->P, F->views) < 0) return -1;
    Py_buffer *opc = &F->views[0];
    if (opc->readonly) {
        PyErr_SetString(PyExc_ValueError, "a Follower's op_cost must be its own writable array");
        goto fail_views;
    }
    F->have_code = code_obj != Py_None;
    if (F->have_code) {
        memset(&F->code, 0, sizeof F->code);
        if (PyObject_GetBuffer(code_obj, &F->code, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto fail_views;
        if (PyObject_GetBuffer(floats_obj, &F->floats, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            PyBuffer_Release(&F->code);
            goto fail_views;
        }
    }
    if (st_init(&F->S, &F->P, budget, F->have_code ? &F->code : NULL, &F->floats, eager, regions, eq, history,
                INFINITY, seed, 0, 0, fixed) < 0)
        goto fail_code;
    F->S.sample = sample;
    F->S.small_percent = small_percent;
    F->S.ex_compute = PyObject_GetAttrString(ex, "compute");
    F->S.ex_drop = F->S.ex_compute ? PyObject_GetAttrString(ex, "drop") : NULL;
    if (!F->S.ex_drop) {
        Py_CLEAR(F->S.ex_compute);
        st_free(&F->S);
        goto fail_code;
    }
    Py_INCREF(ex);
    F->S.ex = ex;
    F->have_state = 1;
    return 0;
fail_code:
    if (F->have_code) { PyBuffer_Release(&F->code); PyBuffer_Release(&F->floats); }
fail_views:
    for (int i = 0; i < N_BUFS; i++) PyBuffer_Release(&F->views[i]);
    return -1;
}

/* Whether a call may work on the state now: set up, not over, not inside an executor's call. */
static int follower_enter(Follower *F) {
    if (!F->have_state) { PyErr_SetString(PyExc_RuntimeError, "the Follower is not set up"); return 0; }
    if (F->busy) { PyErr_SetString(PyExc_RuntimeError, "the engine is busy: an executor called it back"); return 0; }
    if (F->over) { PyErr_SetString(PyExc_RuntimeError, "the run is over (out of memory, or the executor raised)"); return 0; }
    F->busy = 1;
    return 1;
}

static PyObject *follower_leave(Follower *F, int outcome) {
    F->busy = 0;
    if (outcome == OUT_OK) return PyLong_FromLong(0);
    F->over = 1;
    if (outcome == OUT_OOM) return PyLong_FromLong(1);
    if (outcome == OUT_PYERR) return NULL;
    if (outcome == OUT_OVERFLOW) { PyErr_SetString(PyExc_OverflowError, "a score's integer left 128 bits"); return NULL; }
    return PyErr_NoMemory();
}

static int follower_index(PyObject *x, i32 limit, i32 *out, const char *what) {
    long v = PyLong_AsLong(x);
    if (v == -1 && PyErr_Occurred()) return 0;
    if (v < 0 || v >= limit) { PyErr_Format(PyExc_IndexError, "%s %ld is not in the program", what, v); return 0; }
    *out = (i32)v;
    return 1;
}

static PyObject *follower_step(Follower *F, PyObject *arg) {
    i32 end;
    if (!follower_index(arg, F->P.n_steps + 1, &end, "step")) return NULL;
    if (end < F->done) { PyErr_SetString(PyExc_ValueError, "the schedule is taken forward only"); return NULL; }
    if (!follower_enter(F)) return NULL;
    return follower_leave(F, run_steps(&F->S, &F->done, end));
}

/* As pyengine's Engine.prepare (after its step): an operator's arguments touched, made resident
 * and locked, rematerialized in order where not defined. */
static PyObject *follower_prepare(Follower *F, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "arguments must be a sequence of tensors");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    i32 *ts = malloc(sizeof(i32) * (size_t)(n + 1));
    if (!ts) { Py_DECREF(seq); return PyErr_NoMemory(); }
    for (Py_ssize_t k = 0; k < n; k++)
        if (!follower_index(PySequence_Fast_GET_ITEM(seq, k), F->P.n_tensors, &ts[k], "tensor")) {
            free(ts); Py_DECREF(seq); return NULL;
        }
    Py_DECREF(seq);
    if (!follower_enter(F)) { free(ts); return NULL; }
    St *S = &F->S;
    int r = OUT_OK;
    for (Py_ssize_t k = 0; k < n; k++) S->last_access[st_of(S, ts[k])] = S->clock;
    for (Py_ssize_t k = 0; k < n; k++) if (S->defined[ts[k]]) lock(S, st_of(S, ts[k]));
    unsigned char *was = malloc((size_t)n + 1);
    if (!was) r = OUT_NOMEM;
    for (Py_ssize_t k = 0; r == OUT_OK && k < n; k++) was[k] = S->defined[ts[k]];
    for (Py_ssize_t k = 0; r == OUT_OK && k < n; k++) {
        if (was[k]) continue;
        if (!S->defined[ts[k]]) r = materialize(S, ts[k], 1);
        if (r == OUT_OK) lock(S, st_of(S, ts[k]));
    }
    free(was);
    free(ts);
    return follower_leave(F, r);
}

/* After prepare and the operator's run (one the program does not have): the arguments unlocked. */
static PyObject *follower_finish(Follower *F, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "arguments must be a sequence of tensors");
    if (!seq) return NULL;
    if (!follower_enter(F)) { Py_DECREF(seq); return NULL; }
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
        i32 t;
        if (!follower_index(PySequence_Fast_GET_ITEM(seq, k), F->P.n_tensors, &t, "tensor")) {
            F->busy = 0; Py_DECREF(seq); return NULL;
        }
        unlock(&F->S, st_of(&F->S, t));
    }
    Py_DECREF(seq);
    return follower_leave(F, OUT_OK);
}

static PyObject *follower_materialize(Follower *F, PyObject *arg) {
    i32 t;
    if (!follower_index(arg, F->P.n_tensors, &t, "tensor")) return NULL;
    if (!follower_enter(F)) return NULL;
    return follower_leave(F, F->S.defined[t] ? OUT_OK : materialize(&F->S, t, 1));
}

static PyObject *follower_evict(Follower *F, PyObject *arg) {
    i32 s;
    if (!follower_index(arg, F->P.n_storages, &s, "storage")) return NULL;
    if (!follower_enter(F)) return NULL;
    if (!F->S.in_pool[s]) {
        F->busy = 0;
        return PyErr_Format(PyExc_ValueError, "storage %d is not evictable", (int)s);
    }
    evict(&F->S, s, 1);
    return follower_leave(F, F->S.pyerr ? OUT_PYERR : OUT_OK);
}

/* The pool, in its order. */
static PyObject *follower_pool(Follower *F, PyObject *unused) {
    PyObject *out = PyList_New(0);
    for (i32 s = F->have_state ? F->S.pool_head : -1; out && s >= 0; s = F->S.pool_next[s]) {
        PyObject *v = PyLong_FromLong(s);
        if (!v || PyList_Append(out, v) < 0) { Py_XDECREF(v); Py_CLEAR(out); break; }
        Py_DECREF(v);
    }
    return out;
}

/* (material, pinned, locks) of a storage. */
static PyObject *follower_storage(Follower *F, PyObject *arg) {
    i32 s;
    if (!F->have_state || !follower_index(arg, F->P.n_storages, &s, "storage")) return NULL;
    return Py_BuildValue("(iii)", (int)F->S.material[s], (int)F->S.pinned[s], (int)F->S.ref_int[s]);
}

static PyObject *follower_counters(Follower *F, PyObject *unused) {
    const St *S = &F->S;
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:i,s:L}", "clock", (long long)S->clock, "memory",
                         (long long)S->memory, "peak", (long long)S->peak, "remat_ns", (long long)S->remat_ns,
                         "evictions", (long long)S->evictions, "eager_evictions", (long long)S->eager_evictions,
                         "score_evals", (long long)S->evals, "steps_done", (int)F->done, "need", (long long)S->need);
}

static PyMethodDef FOLLOWER_METHODS[] = {
    {"step", (PyCFunction)follower_step, METH_O, "Take the schedule's steps up to (not including) this one."},
    {"prepare", (PyCFunction)follower_prepare, METH_O, "Make these argument tensors resident and lock them."},
    {"finish", (PyCFunction)follower_finish, METH_O, "Unlock the argument tensors prepare locked."},
    {"materialize", (PyCFunction)follower_materialize, METH_O, "Make a tensor resident now."},
    {"evict", (PyCFunction)follower_evict, METH_O, "Evict an evictable storage now, as the policy would."},
    {"pool", (PyCFunction)follower_pool, METH_NOARGS, "The evictable storages, in the pool's order."},
    {"storage", (PyCFunction)follower_storage, METH_O, "(material, pinned, locks) of a storage."},
    {"counters", (PyCFunction)follower_counters, METH_NOARGS, "The run's counters now."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject FollowerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "dtrlab.sim._cengine.Follower",
    .tp_basicsize = sizeof(Follower),
    .tp_dealloc = (destructor)follower_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)follower_traverse,
    .tp_clear = (inquiry)follower_clear,
    .tp_doc = "The compiled engine on a whole program, its schedule taken a step at a time by a source.",
    .tp_methods = FOLLOWER_METHODS,
    .tp_init = (initproc)follower_init,
    .tp_new = PyType_GenericNew,
};

/* ---- the score arithmetic, for tests ---------------------------------------------------------- */

/* A Python int in [-2**127, 2**127) as an i128; -1 with OverflowError outside. */
static int int_from_py(PyObject *x, i128 *out) {
    PyObject *mask = PyLong_FromUnsignedLongLong(UINT64_MAX), *sh = PyLong_FromLong(64);
    PyObject *lo_o = mask ? PyNumber_And(x, mask) : NULL;
    PyObject *hi_o = (lo_o && sh) ? PyNumber_Rshift(x, sh) : NULL; /* floor: x = hi * 2**64 + lo */
    Py_XDECREF(mask);
    Py_XDECREF(sh);
    if (!lo_o || !hi_o) { Py_XDECREF(lo_o); Py_XDECREF(hi_o); return -1; }
    u64 lo = PyLong_AsUnsignedLongLong(lo_o);
    long long hi = PyLong_AsLongLong(hi_o);
    Py_DECREF(lo_o);
    Py_DECREF(hi_o);
    if (PyErr_Occurred()) return -1;
    *out = (i128)(((u128)(u64)hi << 64) | lo);
    return 0;
}

static PyObject *int_to_py(i128 x) {
    PyObject *hi = PyLong_FromLongLong((long long)(x >> 64)), *sh = PyLong_FromLong(64);
    PyObject *lo = PyLong_FromUnsignedLongLong((u64)x);
    PyObject *shifted = (hi && sh) ? PyNumber_Lshift(hi, sh) : NULL;
    PyObject *out = (shifted && lo) ? PyNumber_Or(shifted, lo) : NULL;
    Py_XDECREF(hi); Py_XDECREF(sh); Py_XDECREF(lo); Py_XDECREF(shifted);
    return out;
}

static PyObject *py_quotient(PyObject *self, PyObject *args) {
    PyObject *num_o, *den_o;
    i128 num, den;
    if (!PyArg_ParseTuple(args, "OO", &num_o, &den_o)) return NULL;
    if (int_from_py(num_o, &num) < 0 || int_from_py(den_o, &den) < 0) return NULL;
    if (den <= 0) {
        PyErr_SetString(PyExc_ValueError, "denominator must be in [1, 2**127)");
        return NULL;
    }
    return PyFloat_FromDouble(quotient(num, den));
}

/* evaluate(code, floats, features): the score of a postfix program over feature values (a
 * sequence of N_FEATURES ints and floats); OverflowError where the engine would stop. */
static PyObject *py_evaluate(PyObject *self, PyObject *args) {
    PyObject *code_obj, *floats_obj, *feats;
    if (!PyArg_ParseTuple(args, "OOO", &code_obj, &floats_obj, &feats)) return NULL;
    PyObject *seq = PySequence_Fast(feats, "features must be a sequence");
    if (!seq) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != N_FEATURES) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "features must hold %d values", N_FEATURES);
        return NULL;
    }
    Val fv[N_FEATURES];
    for (int k = 0; k < N_FEATURES; k++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, k);
        if (PyFloat_Check(v)) fv[k] = vdbl(PyFloat_AS_DOUBLE(v));
        else if (int_from_py(v, &fv[k].i) < 0) { Py_DECREF(seq); return NULL; }
        else { fv[k].f = 0; fv[k].d = 0; }
    }
    Py_DECREF(seq);
    Py_buffer code, floats;
    if (PyObject_GetBuffer(code_obj, &code, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (PyObject_GetBuffer(floats_obj, &floats, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&code);
        return NULL;
    }
    St S;
    memset(&S, 0, sizeof S);
    PyObject *out = NULL;
    if (take_program(&S, &code, &floats) == 0) {
        int overflow = 0;
        Val v = run_program(S.code, S.code_n, S.floats, fv, &overflow);
        if (overflow) PyErr_SetString(PyExc_OverflowError, "an integer of the score left 128 bits");
        else out = v.f ? PyFloat_FromDouble(v.d) : int_to_py(v.i);
    }
    PyBuffer_Release(&code);
    PyBuffer_Release(&floats);
    return out;
}

static PyMethodDef METHODS[] = {
    {"run", (PyCFunction)(void (*)(void))py_run, METH_VARARGS | METH_KEYWORDS, "Run one simulation."},
    {"quotient", py_quotient, METH_VARARGS, "num / den correctly rounded (for tests)."},
    {"evaluate", py_evaluate, METH_VARARGS, "A score program over feature values (for tests)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_cengine", "The compiled DTR engine.", -1, METHODS};

/* name -> number for each of names[0..n) */
static PyObject *enum_dict(const char *const *names, int n) {
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < n; i++) {
        PyObject *v = PyLong_FromLong(i);
        if (!v || PyDict_SetItemString(d, names[i], v) < 0) { Py_XDECREF(v); Py_DECREF(d); return NULL; }
        Py_DECREF(v);
    }
    return d;
}

PyMODINIT_FUNC PyInit__cengine(void) {
    static const char *outcomes[] = {"ok", "oom", "remat_limit", "no_memory", "stale", "overflow", "pyerr",
                                     "interrupted"};
    static const char *steps[] = {"compute", "get", "pin", "release"};
    const char *buffers[N_BUFS];
    for (int i = 0; i < N_BUFS; i++) buffers[i] = BUFS[i].name;
    if (PyType_Ready(&FollowerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&MODULE);
    if (!m) return NULL;
    Py_INCREF(&FollowerType);
    if (PyModule_AddObject(m, "Follower", (PyObject *)&FollowerType) < 0) {
        Py_DECREF(&FollowerType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObject(m, "OPCODES", enum_dict(OPCODE_NAMES, N_OPCODES)) < 0 ||
        PyModule_AddObject(m, "FEATURES", enum_dict(FEATURE_NAMES, N_FEATURES)) < 0 ||
        PyModule_AddObject(m, "OUTCOMES", enum_dict(outcomes, 8)) < 0 ||
        PyModule_AddObject(m, "STEP_KINDS", enum_dict(steps, 4)) < 0 ||
        PyModule_AddObject(m, "BUFFERS", enum_dict(buffers, N_BUFS)) < 0 ||
        PyModule_AddObject(m, "EVENT_KINDS", enum_dict(EVENT_KIND_NAMES, N_EVENT_KINDS)) < 0 ||
        PyModule_AddObject(m, "EVENT_INT_COLUMNS", enum_dict(INT_COLUMN_NAMES, N_INT_COLS)) < 0 ||
        PyModule_AddObject(m, "OOM_REASONS", enum_dict(OOM_REASON_NAMES, N_OOM_REASONS)) < 0 ||
        PyModule_AddIntConstant(m, "MAX_STACK", MAX_STACK) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
