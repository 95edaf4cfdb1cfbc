/*
 * test_path.c - the key <-> path rules of the mount (fs/path.c) and the
 * daemon's inode table (fs/inode.c).
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "inode.h"
#include "mooncake/mooncake.h"
#include "path.h"

static void test_name_check(void **state)
{
    char longname[NAME_MAX + 2];
    memset(longname, 'n', sizeof(longname));
    assert_int_equal(fs_name_check("a", 1), 0);
    assert_int_equal(fs_name_check("..a", 3), 0);
    assert_int_equal(fs_name_check("", 0), -EINVAL);
    assert_int_equal(fs_name_check(".", 1), -EINVAL);
    assert_int_equal(fs_name_check("..", 2), -EINVAL);
    assert_int_equal(fs_name_check("a/b", 3), -EINVAL);
    assert_int_equal(fs_name_check("a\0b", 3), -EINVAL);
    assert_int_equal(fs_name_check(longname, NAME_MAX), 0);
    assert_int_equal(fs_name_check(longname, NAME_MAX + 1), -ENAMETOOLONG);
}

static void test_key_join(void **state)
{
    char out[MC_KEY_MAX + 2];
    assert_int_equal(fs_key_join("", 0, "top", out), 3);
    assert_string_equal(out, "top");
    assert_int_equal(fs_key_join("a/b", 3, "c", out), 5);
    assert_string_equal(out, "a/b/c");
    assert_int_equal(fs_key_join("a", 1, "..", out), -EINVAL);
    assert_int_equal(fs_key_join("a", 1, "x/y", out), -EINVAL);

    /* Keys stop one byte short of MC_KEY_MAX: the marker needs a '/'. */
    static char parent[MC_KEY_MAX];
    memset(parent, 'p', sizeof(parent));
    size_t plen = MC_KEY_MAX - 3; /* + '/' + "xy" = MC_KEY_MAX - 0 */
    assert_int_equal(fs_key_join(parent, plen, "xy", out), -ENAMETOOLONG);
    assert_int_equal(fs_key_join(parent, plen, "x", out), (int)(MC_KEY_MAX - 1));
    assert_int_equal(out[plen], '/');
    assert_int_equal(out[MC_KEY_MAX - 1], '\0');
}

static void test_child_name(void **state)
{
    /* Entries as the store lists them under the prefix "d/". */
    assert_int_equal(fs_child_name("d/f", 3, 2), 1);
    assert_int_equal(fs_child_name("d/sub/", 6, 2), 3); /* folded directory */
    assert_int_equal(fs_child_name("d/", 2, 2), -1);    /* the marker itself */
    assert_int_equal(fs_child_name("d//", 3, 2), -1);   /* empty component */
    assert_int_equal(fs_child_name("d/./", 4, 2), -1);
    assert_int_equal(fs_child_name("d/..", 4, 2), -1);
    assert_int_equal(fs_child_name("top", 3, 0), 3); /* the root's prefix is "" */
    assert_int_equal(fs_child_name("/abs/", 5, 0), -1);
    static char key[NAME_MAX + 3];
    memset(key, 'k', sizeof(key));
    assert_int_equal(fs_child_name(key, NAME_MAX, 0), NAME_MAX);
    assert_int_equal(fs_child_name(key, NAME_MAX + 1, 0), -1);
}

static void test_inode_lookup_and_forget(void **state)
{
    fs_itable_t *t = fs_itable_new();
    assert_non_null(t);
    fs_inode_t *root = fs_inode_get(t, 1);
    assert_non_null(root);
    assert_int_equal(root->is_dir, 1);

    fs_inode_t *f = fs_inode_ref(t, "a/b", 3, 0);
    fs_inode_t *d = fs_inode_ref(t, "a/b", 3, 1);
    assert_non_null(f);
    assert_non_null(d);
    assert_true(f != d);
    assert_ptr_equal(fs_inode_ref(t, "a/b", 3, 0), f);
    assert_int_equal(f->nlookup, 2);
    uint64_t ino = f->ino;
    assert_ptr_equal(fs_inode_get(t, ino), f);

    fs_inode_forget(t, f, 1);
    assert_ptr_equal(fs_inode_get(t, ino), f);
    f->opens = 1; /* an open handle keeps it */
    fs_inode_forget(t, f, 1);
    assert_ptr_equal(fs_inode_get(t, ino), f);
    f->opens = 0;
    fs_inode_maybe_free(t, f);
    assert_null(fs_inode_get(t, ino));
    assert_null(fs_inode_find(t, "a/b", 3, 0));
    /* Numbers are never reused. */
    fs_inode_t *g = fs_inode_ref(t, "a/b", 3, 0);
    assert_true(g->ino > ino);
    fs_itable_free(t);
}

static void test_inode_rename_prefix_and_unlink(void **state)
{
    fs_itable_t *t = fs_itable_new();
    fs_inode_t *dir = fs_inode_ref(t, "src", 3, 1);
    fs_inode_t *in = fs_inode_ref(t, "src/x", 5, 0);
    fs_inode_t *deep = fs_inode_ref(t, "src/s/y", 7, 0);
    fs_inode_t *other = fs_inode_ref(t, "srcfoo", 6, 0); /* shares bytes, not the prefix */

    assert_int_equal(fs_inode_rename(t, "src", 3, "dst", 3, 1), 0);
    assert_string_equal(dir->key, "dst");
    assert_string_equal(in->key, "dst/x");
    assert_string_equal(deep->key, "dst/s/y");
    assert_string_equal(other->key, "srcfoo");
    assert_ptr_equal(fs_inode_find(t, "dst/s/y", 7, 0), deep);
    assert_null(fs_inode_find(t, "src/x", 5, 0));

    assert_int_equal(fs_inode_rename(t, "dst/x", 5, "z", 1, 0), 0);
    assert_ptr_equal(fs_inode_find(t, "z", 1, 0), in);

    fs_inode_unlink(t, in);
    assert_null(in->key);
    assert_null(fs_inode_find(t, "z", 1, 0));
    assert_ptr_equal(fs_inode_get(t, in->ino), in); /* the kernel still knows it */
    fs_itable_free(t);
}

static void test_inode_table_grows(void **state)
{
    fs_itable_t *t = fs_itable_new();
    char key[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_non_null(fs_inode_ref(t, key, strlen(key), i % 2));
    }
    assert_int_equal(fs_inode_count(t), 20001);
    for (int i = 0; i < 20000; i += 997) {
        snprintf(key, sizeof(key), "k%d", i);
        fs_inode_t *in = fs_inode_find(t, key, strlen(key), i % 2);
        assert_non_null(in);
        assert_ptr_equal(fs_inode_get(t, in->ino), in);
    }
    fs_itable_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_check),
        cmocka_unit_test(test_key_join),
        cmocka_unit_test(test_child_name),
        cmocka_unit_test(test_inode_lookup_and_forget),
        cmocka_unit_test(test_inode_rename_prefix_and_unlink),
        cmocka_unit_test(test_inode_table_grows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
