/*
 * The chat page served at GET / (src/serve/page.html), embedded in the
 * binary as read-only bytes with a NUL after them:
 *   sp_serve_page_html .. sp_serve_page_html_end (one past the NUL).
 * The path is relative to the repository root, where make runs.  Only
 * generic GNU as directives (no '@' type syntax), so it assembles for
 * x86-64 and aarch64 alike.
 */
    .section .rodata
    .balign 16
    .globl sp_serve_page_html
    .type sp_serve_page_html, %object
sp_serve_page_html:
    .incbin "src/serve/page.html"
    .byte 0
    .globl sp_serve_page_html_end
    .type sp_serve_page_html_end, %object
sp_serve_page_html_end:
    .size sp_serve_page_html, sp_serve_page_html_end - sp_serve_page_html

/* no executable stack */
    .section .note.GNU-stack, "", %progbits
