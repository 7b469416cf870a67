"""Which language a text is written in, cheaply, and the function words of each language we stem.

Teams write post-mortems in their own language, and a stemmer for the wrong language mangles words
("Störungen" stemmed as English stays a different term from the German stem of "Störung"). Script
decides most of it: Cyrillic words are stemmed as Russian, Greek as Greek, Arabic as Arabic, and
words of a script no stemmer covers are kept as they are. Latin script is shared by many languages,
so a text's Latin words take the language whose function words (and letters found in no other of
these languages) it uses most; English wins ties and texts with no such evidence, which keeps
English entries exactly as they were. An organization whose short topics carry no such evidence declares
its language instead (`OrgSettings.set_language`): its Latin-script words are then stemmed in it, in its
entries and its topics alike.

The function-word lists are written for this project: articles, pronouns, auxiliaries, prepositions
and conjunctions. They serve twice: as evidence of the language and as words the lexical arm drops.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from grandbo.errors import InvalidInputError

ENGLISH = "english"
AUTO = "auto"

STOP_WORDS: dict[str, frozenset[str]] = {
    ENGLISH: frozenset(
        """
        a about above after again against all also am an and any are aren as at be because been before being
        below between both but by can cannot could couldn did didn do does doesn doing don down during each
        either else ever every few for from further had hadn has hasn have haven having he her here hers
        herself him himself his how i if in into is isn it its itself just let me might more most must mustn
        my myself neither no nor not now of off on once only or other ought our ours ourselves out over own
        per same shall shan she should shouldn so some such than that the their theirs them themselves then
        there these they this those through thus to too under until up upon us very via was wasn we were
        weren what when where whether which while who whom whose why will with within without won would
        wouldn yet you your yours yourself yourselves
        """.split()
    ),
    "german": frozenset(
        """
        aber alle allem allen aller alles als also am an andere anderen auch auf aus bei beim bin bis bist
        da damit dann das dass dem den denn der des dich die dies diese diesem diesen dieser dieses dir doch
        dort du durch ein eine einem einen einer eines er es etwas euch euer für gegen hat hatte hatten
        hier ich ihm ihn ihnen ihr ihre im in ist ja jede jedem jeden jeder jedes jetzt kann kein keine
        können man mein meine mich mir mit muss nach nicht nichts noch nun nur ob oder ohne sehr sein
        seine sich sie sind so soll sondern über um und uns unser unter vom von vor war waren warum was
        weil welche wenn wer werden wie wieder wir wird wo wurde wurden zu zum zur zwischen
        """.split()
    ),
    "french": frozenset(
        """
        a à afin ai ainsi alors au aucun aussi autre aux avec avoir avons ce ceci cela celle celui ces cet
        cette ceux chaque comme dans de des donc dont du elle elles en encore entre est et étaient était
        été être eux il ils je la le les leur leurs lui ma mais me même mes moi mon ne ni nos notre nous
        on ont ou où par pas pendant peu pour qu que quel quelle qui sa sans se sera ses si son sont sous
        sur ta te tes toi ton tous tout toute toutes très tu un une vos votre vous
        """.split()
    ),
    "spanish": frozenset(
        """
        a al algo algunas algunos ante antes como con contra cual cuando de del desde donde durante el ella
        ellas ellos en entre era eran es esa esas ese eso esos esta estaba estaban estado están está este
        esto estos fue fueron ha había han hasta hay la las le les lo los más me mi mientras muy nada ni
        no nos nosotros otra otras otro otros para pero poco por porque que qué se sea ser si sí sin sino
        sobre son su sus también tan te tiene todo todos tu tus un una unas uno unos ya
        """.split()
    ),
    "italian": frozenset(
        """
        a agli al alla alle allo anche che chi con come cui da dal dalla dalle degli dei del della delle dello è
        di dopo gli ha hanno il in io la le lei lo loro lui ma mentre nei nel nella nelle non per perché più
        quando quella quello questa questo se sono su sua sue sul sulla suo suoi tra tutti tutto una uno
        """.split()
    ),
    "portuguese": frozenset(
        """
        a ao aos as com como da das de dela dele do dos ela elas ele eles em entre era essa esse esta está
        este foi foram há isso isto já mais mas muito na nas não nem no nos num numa os ou para pela pelo
        por porque quando que se sem ser seu seus sua suas são também um uma umas uns você
        """.split()
    ),
    "dutch": frozenset(
        """
        aan al als bij dan dat de der deze die dit door een en er geen had heb heeft het hier hij hoe hun
        ik in is je kan maar me met mij na naar niet nog nu of om ons ook op over te tegen toen tot uit
        van veel voor waren was wat we wel werd wie wij worden wordt zal ze zich zij zijn zo zonder
        """.split()
    ),
    "russian": frozenset(
        """
        а без бы был была были было быть в вам вас весь во вот все всё всех вы где да даже для до его ее её
        если есть ещё еще же за здесь и из или им их к как когда кто ли либо мне может мы на над не нет ни
        но о об он она они оно от по под при с со так также там тебя то того тоже только тот ты у уже
        чем что чтобы эта эти это этот я
        """.split()
    ),
}

# Letters that, among the Latin-script languages above, only one of them writes.
_OWN_LETTERS = {"ä": "german", "ö": "german", "ü": "german", "ñ": "spanish", "ç": "french",
                "œ": "french", "ê": "french", "ã": "portuguese", "õ": "portuguese",
                "ì": "italian", "ò": "italian"}  # fmt: skip
LATIN_LANGUAGES = (ENGLISH, "german", "french", "spanish", "italian", "portuguese", "dutch")
"""The languages a text's Latin-script words are detected in, and the ones an organization may declare."""
_VOTES: dict[str, tuple[str, ...]] = {}
for _language in LATIN_LANGUAGES:
    for _word in STOP_WORDS[_language]:
        _VOTES[_word] = (*_VOTES.get(_word, ()), _language)
_VOTE_WORDS = frozenset(_VOTES)
_OWN_LETTER_SET = frozenset(_OWN_LETTERS)


def latin_language(words: Iterable[str]) -> str:
    """The language of a text's case-folded words: the one with the most distinct function words (and
    letters of its own) among them, English when no other language has more."""
    distinct = set(words)
    tally: Counter[str] = Counter()
    for word in _VOTE_WORDS.intersection(distinct):
        tally.update(_VOTES[word])
    foreign = "".join(word for word in distinct if not word.isascii())
    if foreign:
        tally.update(_OWN_LETTERS[ch] for ch in _OWN_LETTER_SET.intersection(foreign))
    if not tally:
        return ENGLISH
    best, count = max(tally.items(), key=lambda item: (item[1], item[0] == ENGLISH))
    return best if count > tally[ENGLISH] else ENGLISH


def script_language(word: str) -> str | None:
    """The stemmer language a non-Latin word's script implies, or None when no stemmer covers it."""
    code = ord(word[0])
    if 0x0400 <= code <= 0x052F:
        return "russian"
    if 0x0370 <= code <= 0x03FF:
        return "greek"
    if 0x0600 <= code <= 0x06FF:
        return "arabic"
    return None


def declared(name: str) -> str | None:
    """The stemmer language an organization declares by `name` (None for `auto`: detection), or a clear error.

    Only Latin-script languages are declared: Cyrillic, Greek and Arabic words are stemmed by their
    script whatever the declaration, and Chinese and Japanese text is indexed by character pairs."""
    wanted = name.strip().casefold()
    if wanted == AUTO:
        return None
    if wanted in LATIN_LANGUAGES:
        return wanted
    raise InvalidInputError(
        f"Unknown language {name!r}: use {AUTO} (detect each text's language) or one of "
        f"{', '.join(LATIN_LANGUAGES)}. Cyrillic, Greek and Arabic words are always stemmed by their script "
        "(Russian, Greek, Arabic), so there is nothing to declare for them.",
        detail={"language": name, "languages": [AUTO, *LATIN_LANGUAGES]},
    )
