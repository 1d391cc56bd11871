/* The activation arena that the CPU and the GPU model both carve
 * (model_act_sizes, model_point_acts): every tensor at a multiple of
 * ARENA_ALIGN bytes, in the structs' order, none overlapping the next, all
 * inside the bytes the layout reports; and the CPU model's own arena is that
 * layout. */
#include "tests/check_suite.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "experiments/trainer/model.h"

/* The tensors of a and d in layout order, with their element counts. */
static int tensors(const activation_tensors *a, const grad_act_tensors *d, const size_t *act,
                   const size_t *grad_act, real *ptr[], size_t size[]) {
  real *const p[NUM_ACT_TENSORS + NUM_GRAD_ACT_TENSORS] = {
      a->res, a->ln1, a->ln1_rstd, a->q, a->k, a->v, a->att, a->atty, a->res_mid, a->ln2,
      a->ln2_rstd, a->h1, a->h3, a->hg, a->lnf, a->lnf_rstd, a->probs, a->losses,
      d->dres, d->dln, d->datty, d->dq, d->dk, d->dv, d->datt, d->dh1, d->dh3, d->dhg};
  int n = 0;
  for (; n < NUM_ACT_TENSORS; n++) ptr[n] = p[n], size[n] = act[n];
  for (int i = 0; i < NUM_GRAD_ACT_TENSORS; i++, n++) ptr[n] = p[n], size[n] = grad_act[i];
  return n;
}

START_TEST(activations_aligned_ordered_disjoint) {
  static const char *const names[] = {"test", "tiny"};
  static const int batches[][2] = {{1, 1}, {1, 7}, {3, 16}, {2, 5}};
  for (size_t s = 0; s < sizeof names / sizeof *names; s++)
    for (size_t b = 0; b < sizeof batches / sizeof *batches; b++) {
      model_config c;
      ck_assert_int_eq(model_named_size(names[s], &c), 0);
      const int B = batches[b][0], T = batches[b][1];
      size_t act[NUM_ACT_TENSORS], grad_act[NUM_GRAD_ACT_TENSORS];
      model_act_sizes(&c, B, T, act, grad_act);
      activation_tensors a;
      grad_act_tensors d;
      const size_t bytes = model_point_acts(&a, &d, NULL, act, grad_act);
      ck_assert_uint_eq(bytes % ARENA_ALIGN, 0);
      char *mem = aligned_alloc(ARENA_ALIGN, bytes);
      ck_assert_ptr_nonnull(mem);
      ck_assert_uint_eq(model_point_acts(&a, &d, mem, act, grad_act), bytes);
      real *ptr[NUM_ACT_TENSORS + NUM_GRAD_ACT_TENSORS];
      size_t size[NUM_ACT_TENSORS + NUM_GRAD_ACT_TENSORS];
      const int n = tensors(&a, &d, act, grad_act, ptr, size);
      ck_assert_ptr_eq(ptr[0], (real *)mem);
      for (int i = 0; i < n; i++) {
        ck_assert_msg((uintptr_t)ptr[i] % ARENA_ALIGN == 0, "%s B=%d T=%d: tensor %d at %p",
                      names[s], B, T, i, (void *)ptr[i]);
        const char *end = (const char *)(ptr[i] + size[i]);
        ck_assert_msg(end <= (i + 1 < n ? (const char *)ptr[i + 1] : mem + bytes),
                      "%s B=%d T=%d: tensor %d (%zu elements) runs into the next", names[s], B,
                      T, i, size[i]);
      }
      /* the CPU model's arena is this layout */
      model m;
      ck_assert_int_eq(model_init(&m, &c, 1), 0);
      ck_assert_int_eq(model_reserve(&m, B, T), 0);
      real *mptr[NUM_ACT_TENSORS + NUM_GRAD_ACT_TENSORS];
      size_t msize[NUM_ACT_TENSORS + NUM_GRAD_ACT_TENSORS];
      tensors(&m.acts, &m.grad_acts, m.act_sizes, m.grad_act_sizes, mptr, msize);
      for (int i = 0; i < n; i++) {
        ck_assert_uint_eq(msize[i], size[i]);
        ck_assert_int_eq((char *)mptr[i] - (char *)m.acts_mem, (char *)ptr[i] - mem);
      }
      model_free(&m);
      free(mem);
    }
  printf("activation layouts of test and tiny: aligned to %d bytes, ordered, disjoint\n",
         ARENA_ALIGN);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {activations_aligned_ordered_disjoint, NULL};
  return run_suite(suite_of("layout", 60, tests), true);
}
