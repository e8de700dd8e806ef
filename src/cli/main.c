#include "base/base.h"
#include <stdio.h>
int main(void) { sp_base_init(); printf("specula\n"); return 0; }
