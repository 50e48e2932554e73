"""Why a page that loaded yields no text (issue 24: never ``STATUS OK`` with empty content).

The reason travels in the fetch reply as ``ERROR empty_content:<why>`` on a PARTIAL (SPEC R-2):

    empty_body                          the body holds nothing but whitespace
    script_only,render_off              an HTML page whose text is built by its scripts, not
                                        rendered: RENDER never (or web.fetch.render: never)
    script_only,render_unavailable      the same, and no Chromium to render it (rendering.py)
    script_only,render_failed:<why>     the same, and its auto render failed for the renderer's
                                        sake (rendering.py: render_timeout, browser_unavailable,
                                        page_crashed, render_tls_verify_failed...)
    rendered_empty                      the browser rendered the page and it still has no text
                                        (its scripts failed, or the guard refused what they
                                        asked for)
    no_text                             markup with no readable text and no scripts

An app shell left as served (``appshell.py`` told it; RENDER never, no Chromium, or its render
failed) whose text is only its title and a placeholder its scripts would replace ("Loading...",
"Please wait") is empty too: ``is_placeholder``. The rest of its view is still sent.
"""

from __future__ import annotations

import re

EMPTY_BODY = "empty_body"
SCRIPT_ONLY = "script_only"  # rendering.py adds why it was not rendered
RENDERED_EMPTY = "rendered_empty"
NO_TEXT = "no_text"
# An app shell's tell: an external or inline script, or a <noscript> asking for JavaScript.
_SCRIPTED = re.compile(r"<script[\s>]|<noscript[\s>]", re.I)
# Fewer words than this past an app shell's title may be a placeholder, not content: the ones
# shells show run 1 to 7 words ("Loading...", "Just a moment...", "This page requires
# JavaScript to work properly"), and of the 688 dev corpus pages the fewest words past the
# title among those with a shell tell is 20 (a schedule page's lead): twice this.
PLACEHOLDER_WORDS = 10
# A placeholder is also only placeholder wording (review 3: a short page with one analytics
# script is told a shell, and "Thanks for subscribing!" or a 404 sentence is its content):
# every word past the title is one of ``_FILLER`` and one at least is an ``_ANCHOR``, the word
# that says "not ready yet" (loading, wait, a moment) or "needs JavaScript". English and the
# languages the dev corpora hold most (French, German, Spanish, Italian, Portuguese, Dutch,
# Russian, Japanese, Chinese); a page in another language keeps its text (the safe side).
_ANCHOR_WORDS = """loading wait moment javascript js initializing initialising redirecting
    chargement patienter patientez laden geladen warten cargando espere espera
    caricamento attendere attendi carregando aguarde wachten
    загрузка подождите 読み込み中 ロード中 読込中 加载中 載入中 正在加载"""
_ANCHOR = frozenset(_ANCHOR_WORDS.split())
_FILLER_WORDS = """a an the this that it its is are be being been to of for in on and or with while
    please just one still your you we our app application page site website web content
    need needs needed must required requires require enable enabled disabled turn turned
    run running work working properly correctly browser does not support supported view
    use using load loads
    en cours veuillez activer activez activé est requis requise désactivé vous devez pour
    le la les ce cette votre navigateur de du des un une site fonctionner
    bitte einen augenblick aktivieren sie ist deaktiviert erforderlich um diese seite zu
    nutzen ihrem browser in wird
    por favor un momento habilite active activa está desactivado requiere necesita para
    esta página su navegador se
    per favore attivare è richiesto disattivato questa pagina il tuo
    por favor ative está desativado é necessário esta página seu o
    even een ogenblik geduld inschakelen vereist uitgeschakeld
    пожалуйста включите требуется отключен для работы сайта"""
_FILLER = _ANCHOR | frozenset(_FILLER_WORDS.split())
_TITLE_LINE = re.compile(r"\A\s*#{1,6} [^\n]*")
_WORD = re.compile(r"\w+")


def empty_why(kind: str, text: str) -> str:
    """The reason a page of ``kind`` whose decoded body is ``text`` yields no readable text."""
    if not text.strip():
        return EMPTY_BODY
    if kind == "html" and _SCRIPTED.search(text):
        return SCRIPT_ONLY
    return NO_TEXT


def is_empty(content: str) -> bool:
    """Whether ``content`` (a view fetch would send) holds no readable character."""
    return not content.strip()


def is_placeholder(content: str) -> bool:
    """Whether ``content``, the view of an app shell left as served, holds no more than a
    title heading and a placeholder its scripts would replace: nothing, or fewer than
    ``PLACEHOLDER_WORDS`` words all of them loading or JavaScript-required wording
    ("Loading...", "Please wait", "You need to enable JavaScript to run this app"). Judge
    only a page that was told a shell: a short page as written is content, and so is a short
    sentence of its own on a shell ("Thanks for subscribing!", "Not Found")."""
    rest = _TITLE_LINE.sub("", content, count=1)
    words = [word.lower() for word in _WORD.findall(rest)]
    if not words:
        return True
    if len(words) >= PLACEHOLDER_WORDS:
        return False
    return all(word in _FILLER for word in words) and any(word in _ANCHOR for word in words)
