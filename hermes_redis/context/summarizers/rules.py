"""What the extractive summarizer knows about language, as data: the patterns and word lists
it reads a conversation with, grouped by what they decide. The algorithm that uses them is
``extractive.py``; the summary's own line format lives there too, beside its parser.

English and Chinese. CJK characters and the stop-word list are the package's own
(``hermes_redis.core.text``); the summarizer only adds its words to them here.
"""

from __future__ import annotations

import datetime as dt
import re

from hermes_redis.core.text import STOP_WORDS


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# --- sentences and words ----------------------------------------------------------------------
# A sentence ends at . ! ? followed by a space (so "Next.js 14" and "v1.2" stay whole) or at
# CJK end punctuation; fenced code is not prose and is left out.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])|\s+(?=\[)")
FENCE = re.compile(r"```.*?(?:```|$)", re.S)
# A word: letters or digits, with inner apostrophes, dots, slashes, dashes ("don't", "v1.2",
# "src/app", "C++").
WORD = re.compile(r"[^\W_][\w'’+./-]*[\w+]|[^\W_]")
# Where a sentence or a summary line starts: a capital there is not a name.
SENTENCE_START = re.compile(r"(?:^|[.!?;:]\s+|- )(\S+)")
# A leading "Name: " of an imported multi-party chat: who said the message.
SPEAKER = re.compile(r"^([A-Z][\w'’.-]{0,30}(?: [A-Z][\w'’.-]{0,30}){0,2}): (?=\S)")
# "haven't", "how're": the contraction a word's base drops.
CONTRACTION = re.compile(r"(?:n't|['’](?:s|re|ve|d|ll|m|t))$")

# --- what a sentence is -----------------------------------------------------------------------
DECISION = re.compile(
    r"\b(decid\w*|decision|agreed (?:on|to|that)|chose|choose|going with|go with|switch(?:ed)? to|"
    r"(?:we|let's|let us|i'll|we'll|will|should|to|and|then|just)\s+use|instead of|"
    r"not use|don't use|settled on|stick with|opt(?:ed)? for)\b|^use\b"
    r"|决定|采用|使用|改用|不用|选择|确定|统一",
    re.IGNORECASE,
)
EXPLICIT_OPEN = re.compile(r"\b(todo|open question|next steps?|pending|tbd|follow[- ]up|"
                           r"still need|needs? to be|to be decided|unresolved|blocked)\b"
                           r"|待定|待办|之后再|未解决", re.I)
QUESTION = re.compile(r"[?？]\s*$")
# The user's request, said first: "Can you build …", "帮我写一个 …".
GOAL = re.compile(
    r"^(?:(?:please|pls|can you|could you|would you|help me|i want(?: you)? to|i need(?: you)? to|"
    r"i'd like(?: you)? to|we need to|let's|goal:?|task:?)\s+)*"
    r"(?:write|build|create|implement|add|fix|make|set up|setup|refactor|design|debug|migrate|"
    r"deploy|port|convert|optimi[sz]e|review|explain|generate|help)\b"
    r"|^(?:帮我|请|我想|我需要|需要|实现|编写|写一个)", re.I)

# --- file paths -------------------------------------------------------------------------------
PATH = re.compile(  # starts only at a word's start: one long token costs O(n), not O(n²)
    r"(?<![\w.-])(?:[\w.-]+/)+[\w-]+(?:\.[\w-]+)*|\b[\w-]+\.(?:py|js|ts|tsx|md|ya?ml|json|sql|toml|go|rs|sh|txt|cfg|ini)\b"
)
FRAMEWORK = re.compile(r"[A-Z][a-z]+\.js")  # Next.js, Vue.js: a name, not a file

# --- what cleaning drops ----------------------------------------------------------------------
# Leading interjections, vocatives and filler that carry no fact ("Wow, ", "Yeah, ", "I'm so
# glad ", "To be honest, "); removed again and again from a sentence's start.
LEAD = re.compile(
    r"^(?:(?:wow|oh|ah+|aw+|hey|hi|hello|yeah|yep|yes|yup|nope|ok|okay|well|so|um+|uh+|hmm+|"
    r"haha\w*|lol|omg|gosh|totally|absolutely|definitely|sure|right|cool|great|awesome|nice|"
    r"thanks|thank you|sorry|exactly|true|indeed|oops|whoa|man|btw|by the way|anyway|anyways|"
    r"honestly|actually|basically|agreed|also|plus|and|but|fyi|guess what|you know what|"
    r"oh my god|oh no|aww|yay|hooray|sounds good|good news)\b[\s,!.…:;—–-]*"
    r"|(?:i'?m|i am) (?:so |really |super |very )?(?:glad|happy|thrilled|excited|stoked) "
    r"(?:that |to (?:hear|say|see|know) (?:that )?)?"
    r"|(?:i think|i guess|i feel like|i believe|i mean|to be honest|tbh|just so you know|"
    r"you know|it's (?:so |really )?(?:great|awesome|cool|nice) (?:that|to see|to hear)|"
    r"it turns out|turns out|as i said|like i said)[\s,]+)",
    re.I,
)
CALLED_OUT = re.compile(r"^[A-Z][a-z]+[!,]\s+")  # "Caroline! ", once a lead is gone
FILLER = re.compile(
    r"\b(?:you know|i mean|kind of|sort of|kinda|sorta|really|very|so much|super|totally|truly|"
    r"just|actually|basically|literally|honestly|definitely|absolutely|quite|pretty much|"
    r"a lot of|lots of|a bit|a little|such a|so)\b[ ,]*",
    re.I,
)
VOCATIVE = re.compile(r",\s+[A-Z][a-z]{1,14}\s*([.!?…]*)$")  # "..., Mel!": said to someone
SELF = re.compile(r"^(?:i|i'm|i am|i've|i have|we|we're|we've)\s+(?=\w)", re.I)
ARTICLE = re.compile(r"(?<=\s)(?:a|an|the)\s+(?=\w)")
SPACES = re.compile(r"\s+([,.;:!?])|\s{2,}")

# --- dates ------------------------------------------------------------------------------------
# A date said relative to the day of the message: "yesterday", "last Saturday", "next month",
# "2 weeks ago". Groups: word; rel, weekday; rel2, unit2; count, unit.
RELATIVE_DATE = re.compile(
    r"\b(?:(yesterday|today|tonight|tomorrow|last night|this morning)"
    r"|(last|this past|next|this coming) (monday|tuesday|wednesday|thursday|friday|saturday|"
    r"sunday|mon|tues?|wed|thu(?:rs?)?|fri|sat|sun)\b\.?"
    r"|(last|this|next) (year|month|week|weekend)"
    r"|(\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few) "
    r"(days?|weeks?|months?|years?) ago)\b",
    re.I,
)
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
WEEKDAY_ABBR = {"mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3,
                "fri": 4, "sat": 5, "sun": 6}
NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
                "seven": 7, "eight": 8, "nine": 9, "ten": 10, "couple of": 2, "few": 3}
MONTHS = frozenset(dt.date(2000, m, 1).strftime("%B") for m in range(1, 13))  # as headings say
# Words that only say when: a line of them and names says nothing.
TIME_WORDS = frozenset({m.lower() for m in MONTHS} | {"am", "pm", "utc", "gmt"} | set(WEEKDAYS))

# --- word lists -------------------------------------------------------------------------------
# The function words of chat beyond the package's stop words: contractions, pronouns,
# conjunctions, modals and chat spellings.
SUMMARY_EXTRA = _words("""
i'm i've i'd i'll you're you've you'd you'll he's she's it's we're we've we'll they're they've
that's there's here's what's how's where's who's let's y'all
don't doesn't didn't isn't aren't wasn't weren't can't couldn't won't wouldn't shouldn't ain't
haven't hasn't hadn't
mine myself us ours ourselves yourself himself herself itself theirs themselves whose
each every both either neither nor someone anyone everyone something anything everything
nothing ones
because between during down off since though although unless whether via per unlike yet even
less lot lots bit
may might must shall
ya u gonna wanna gotta lemme cuz 'cause nah yo hmm ok anyways
""")
# Stop words that are no function words to the summarizer: it files know, say, said, tell and
# think as chat words, and a compressed line keeps the negations and get, go, got, went, way,
# other, through ("went to the support group").
SUMMARY_KEEPS = _words("know say said tell think no not get go got went way other through")
# Words that say nothing by themselves: never content, never a name; a compressed line drops
# them.
FUNCTION_WORDS = (STOP_WORDS | SUMMARY_EXTRA) - SUMMARY_KEEPS
# Small talk: feelings, praise, agreement, fillers. Never content, never a name; a compressed
# line drops them, and a line of only these is no fact.
CHAT_WORDS = _words("""
great good nice cool awesome amazing wonderful fantastic incredible beautiful lovely sweet
fun glad happy proud love loved loving lovin like liked likes thanks thank thankful appreciate
appreciated agree agreed totally absolutely definitely sure hope hoping hopefully wish care
caring feel feeling feels felt sounds sound sounded seem seems seemed look looks looking
looked wow really super such thing things stuff kind sort always sometimes maybe perhaps
probably well yeah yes yep yup oh ah hey hi hello okay ok right exactly true cheers bye soon
talk talking chat chatting catch ya hear heard know knew think thought guess mean means
meant say said tell told share sharing shared keep kept rock rocks blast excited
exciting inspiring inspired inspire inspiration powerful special important stoked
thrilled impressive impressed congrats congratulations brilliant perfect fine tough hard
easy sad sorry bummer yay omg lol haha wait hmm cute gorgeous stunning neat fab fabulous
best better worse worst big huge tiny little lucky blessed grateful supportive
encouraging encouragement cheer vibe vibes
def defo kinda sorta gonna wanna enjoy enjoyed enjoying wonder
interesting curious anytime reach meaningful matter matters worth mind thoughts
""")
# Words of every conversation: never content, never a name, but a compressed line keeps those
# that are no function words (they say what happened: "went", "made", "started").
GENERIC_WORDS = _words("""
time times day days week weeks month months year years today tonight yesterday tomorrow
people person life way ways place part lot idea ideas moment moments experience
experiences journey world everyone family friend friends get got getting go going gone went
come came coming make made making take took taking give gave given want wanted need needed try
tried trying use used using work working worked see saw seen seeing find found let help helped
helps helping start started new old other another first last next few own back still even
pic photo picture shares
""")
# Every word that is not content: it adds nothing to what a line says and is never a name.
COMMON_WORDS = FUNCTION_WORDS | CHAT_WORDS | GENERIC_WORDS | {"no", "not", "never"}
# What a compressed line keeps although it is common: the words that turn its meaning.
KEEP_IN_SHORT = frozenset({"no", "not", "never", "without", "instead", "vs"})
# Words that label a line rather than name who said it ("Update: …", "Note: …").
LABEL_WORDS = _words("""update updated note noted notes todo open question answer summary error
warning fix fixed step steps decision decisions fact facts files file goal task issue problem
result results output input example important reminder status tip hint caveat plan context
done edit edited change changes changed feature bug conclusion recap ps first second third
finally next then now also reason why because info warn debug trace usage options option
test tests failed passed success failure response request reply user assistant system tool
added removed renamed moved created deleted resolved pending testing running loading using
following thinking working proposal proposed suggestion suggested expected actual
""")
